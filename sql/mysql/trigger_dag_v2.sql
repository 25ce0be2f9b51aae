-- trigger_dag_v2(dag_id, run_id, conf, now): a manual run, created `queued`;
-- create_dag_runs_v2 starts it when max_active_runs allows. A NULL run_id becomes
-- manual__<now in UTC, ISO 8601 with microseconds>.
-- New in v2: the run id must follow engine/validate.py's RUN_ID_RULE: 1-250 characters from
-- A-Z a-z 0-9 _ . - : + ~, and not '.' or '..', so it is a safe path component (log files) and
-- fits MySQL's VARCHAR(250). Anything else ('', '../x', 300 characters, a space, a NUL) is
-- refused before anything is written.
-- Lock: none beyond the row it inserts; the unique key (dag_id, run_id) makes a second
-- trigger with the same run id fail instead of duplicating the run.
-- Invariant: one run per (dag_id, run_id); every run id it writes follows RUN_ID_RULE.
-- Callers may assume: on success the run exists, `queued`.
-- Raises (one line) for a bad run id, an unknown or inactive DAG and a duplicate run id.
-- MySQL: a PROCEDURE whose final SELECT returns (dag_run_id, run_id); errors are
-- SIGNAL SQLSTATE '45000' (error 1644), MESSAGE_TEXT kept within MySQL's 128 characters;
-- no INSERT ... RETURNING: LAST_INSERT_ID(). The ids are TEXT parameters, so a 300-character
-- one reaches the check instead of failing as "data too long" for a VARCHAR(250). The rule is
-- tested by deleting every allowed character and counting what is left (no anchors: MariaDB's
-- '$' also matches before a final newline; no comparison with '': the PAD SPACE collation
-- finds ' ' equal to '').
CREATE PROCEDURE trigger_dag_v2(IN p_dag_id TEXT, IN p_run_id TEXT, IN p_conf JSON, IN p_now DATETIME(6))
BEGIN
    DECLARE v_now DATETIME(6);
    DECLARE v_run TEXT;
    DECLARE v_msg VARCHAR(128);
    DECLARE v_n   INT;
    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET v_run = COALESCE(p_run_id, CONCAT('manual__', DATE_FORMAT(v_now, '%Y-%m-%dT%H:%i:%s.%f+00:00')));
    IF CHAR_LENGTH(v_run) NOT BETWEEN 1 AND 250 OR CHAR_LENGTH(REGEXP_REPLACE(v_run, '[A-Za-z0-9_.:+~-]', '')) > 0
       OR v_run IN ('.', '..') THEN
        SET v_msg = LEFT(CONCAT('bad run id ', QUOTE(CONCAT(REGEXP_REPLACE(LEFT(v_run, 30), '[[:cntrl:]]', '?'),
                                                            CASE WHEN CHAR_LENGTH(v_run) > 30 THEN '...' ELSE '' END)),
                                '; use 1-250 characters from A-Z a-z 0-9 _ . - : + ~ (not ''.'' or ''..'')'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SELECT COUNT(*) INTO v_n FROM dag d WHERE d.dag_id = p_dag_id AND d.is_active;
    IF v_n = 0 THEN
        SET v_msg = LEFT(CONCAT('unknown DAG ', QUOTE(LEFT(p_dag_id, 40)),
                                ': not synced or no longer in the DAG files; see `engine dags list`'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SELECT COUNT(*) INTO v_n FROM dag_run r WHERE r.dag_id = p_dag_id AND r.run_id = v_run;
    IF v_n > 0 THEN
        SET v_msg = LEFT(CONCAT('DAG ', QUOTE(LEFT(p_dag_id, 40)), ' already has a run ', QUOTE(LEFT(v_run, 40)),
                                '; pick another --run-id'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    INSERT INTO dag_run (dag_id, run_id, run_type, state, logical_date, run_after, conf, created_at)
    VALUES (p_dag_id, v_run, 'manual', 'queued', v_now, v_now, COALESCE(p_conf, '{}'), v_now);
    SELECT CAST(LAST_INSERT_ID() AS SIGNED) AS dag_run_id, v_run AS run_id;
END
