-- trigger_dag_v3(dag_id, run_id, conf, logical_date, now): a manual run, created `queued`, as
-- trigger_dag_v2, with a logical date of the caller's (`engine dags trigger --logical-date`,
-- `engine dags test`); NULL: now. A NULL run_id becomes manual__<logical date in UTC, ISO 8601
-- with microseconds>.
-- Lock: none beyond the row it inserts; the unique key (dag_id, run_id) makes a second
-- trigger with the same run id fail instead of duplicating the run.
-- Invariant: one run per (dag_id, run_id); every run id it writes follows RUN_ID_RULE
-- (engine/validate.py).
-- Callers may assume: on success the run exists, `queued`.
-- Raises (one line) for a bad run id, an unknown or inactive DAG, a duplicate run id and a
-- logical date outside 1970-2999 (engine/validate.py MIN_DATE, MAX_DATE).
-- MySQL: a PROCEDURE whose final SELECT returns (dag_run_id, run_id); as trigger_dag_v2 for
-- the run id rule and the messages.
CREATE PROCEDURE trigger_dag_v3(IN p_dag_id TEXT, IN p_run_id TEXT, IN p_conf JSON, IN p_logical_date DATETIME(6),
                                IN p_now DATETIME(6))
BEGIN
    DECLARE v_now     DATETIME(6);
    DECLARE v_logical DATETIME(6);
    DECLARE v_run     TEXT;
    DECLARE v_msg     VARCHAR(128);
    DECLARE v_n       INT;
    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET v_logical = COALESCE(p_logical_date, v_now);
    IF v_logical < '1970-01-01 00:00:00' OR v_logical > '2999-12-31 23:59:59' THEN
        SET v_msg = LEFT(CONCAT('logical date ', v_logical, ' is out of range; use a date from 1970-01-01 to 2999-12-31'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SET v_run = COALESCE(p_run_id, CONCAT('manual__', DATE_FORMAT(v_logical, '%Y-%m-%dT%H:%i:%s.%f+00:00')));
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
    VALUES (p_dag_id, v_run, 'manual', 'queued', v_logical, v_now, COALESCE(p_conf, '{}'), v_now);
    SELECT CAST(LAST_INSERT_ID() AS SIGNED) AS dag_run_id, v_run AS run_id;
END
