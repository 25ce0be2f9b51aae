-- trigger_dag_v1(dag_id, run_id, conf, now): a manual run, created `queued`;
-- create_dag_runs_v1 starts it when max_active_runs allows.
-- Lock: none beyond the row it inserts; the unique key (dag_id, run_id) makes a second
-- trigger with the same run id fail instead of duplicating the run.
-- Raises (one line) for an unknown or inactive DAG and a duplicate run id.
-- MySQL: a PROCEDURE whose final SELECT returns (dag_run_id, run_id); errors are
-- SIGNAL SQLSTATE '45000' (error 1644), MESSAGE_TEXT kept within MySQL's 128 characters;
-- no INSERT ... RETURNING: LAST_INSERT_ID().
CREATE PROCEDURE trigger_dag_v1(IN p_dag_id VARCHAR(250), IN p_run_id VARCHAR(250), IN p_conf JSON,
                                IN p_now DATETIME(6))
BEGIN
    DECLARE v_now DATETIME(6);
    DECLARE v_run VARCHAR(250);
    DECLARE v_msg VARCHAR(128);
    DECLARE v_n   INT;
    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET v_run = COALESCE(p_run_id, CONCAT('manual__', DATE_FORMAT(v_now, '%Y-%m-%dT%H:%i:%s.%f+00:00')));
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
