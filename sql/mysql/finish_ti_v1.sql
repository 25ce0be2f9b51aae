-- finish_ti_v1(ti_id, try_number, exit_code, timed_out, reason, now): a worker reports how a
-- try ended; the database decides what it means and returns the new state (NULL when the
-- report is stale: the TI is no longer running that try, e.g. it was reset as an orphan).
--   exit 0                 -> success
--   exit 99 (not timed out)-> skipped (Airflow's skip_on_exit_code; PythonTask raises SkipTask)
--   otherwise              -> up_for_retry while try_number <= retries, with retry_at =
--                             now + retry_delay (exponential: retry_delay * 2^(try-1), capped
--                             by max_retry_delay, default one day), else failed.
-- The pool slot is released by the state change itself (usage counts queued/running/deferred).
--
-- Lock: the task_instance row, FOR UPDATE, for the compare-and-set on (state, try_number).
-- Invariant: one history row per finished try; a late or repeated report changes nothing.
-- MySQL: a FUNCTION that modifies data (see heartbeat_v1 about binary logging). The task row
-- is read without a lock (MariaDB has no FOR UPDATE OF: a join would lock it too, and every
-- worker finishing a TI of the same task would queue behind it).
CREATE FUNCTION finish_ti_v1(p_ti_id BIGINT, p_try_number INT, p_exit_code INT, p_timed_out BOOLEAN,
                             p_reason TEXT, p_now DATETIME(6))
RETURNS VARCHAR(20)
NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    DECLARE v_now       DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_state     VARCHAR(20);
    DECLARE v_delay     DOUBLE;
    DECLARE v_cur_state VARCHAR(20);
    DECLARE v_try       INT;
    DECLARE v_max_tries INT;
    DECLARE v_dag_id    VARCHAR(250);
    DECLARE v_task_id   VARCHAR(250);
    DECLARE v_retry_delay DOUBLE;
    DECLARE v_backoff   BOOLEAN;
    DECLARE v_max_delay DOUBLE;
    DECLARE v_reason    TEXT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_cur_state = NULL;
    SET p_timed_out = COALESCE(p_timed_out, FALSE);  -- PostgreSQL: DEFAULT false

    SELECT ti.state, ti.try_number, ti.max_tries, ti.dag_id, ti.task_id
    INTO v_cur_state, v_try, v_max_tries, v_dag_id, v_task_id
    FROM task_instance ti WHERE ti.id = p_ti_id
    FOR UPDATE;
    IF v_cur_state IS NULL OR v_cur_state <> 'running' OR v_try <> p_try_number THEN
        RETURN NULL;
    END IF;
    SELECT t.retry_delay, t.retry_exponential_backoff, t.max_retry_delay
    INTO v_retry_delay, v_backoff, v_max_delay
    FROM task t WHERE t.dag_id = v_dag_id AND t.task_id = v_task_id;

    IF NOT p_timed_out AND p_exit_code = 0 THEN
        SET v_state = 'success';
    ELSEIF NOT p_timed_out AND p_exit_code = 99 THEN
        SET v_state = 'skipped';
    ELSEIF v_try <= v_max_tries THEN
        SET v_state = 'up_for_retry';
        SET v_delay = CASE WHEN v_backoff
                           THEN LEAST(v_retry_delay * POW(2, v_try - 1), COALESCE(v_max_delay, 86400))
                           ELSE v_retry_delay END;
    ELSE
        SET v_state = 'failed';
    END IF;
    SET v_reason = CASE WHEN p_timed_out THEN 'execution_timeout exceeded' ELSE p_reason END;

    -- History first: every column it copies is one the UPDATE below leaves alone.
    INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                       pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                       worker_job_id, log_path, reason)
    SELECT ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number,
           CASE WHEN v_state = 'up_for_retry' THEN 'failed' ELSE v_state END,
           ti.pool, ti.pool_slots, ti.queued_at, ti.start_date, v_now, p_exit_code, ti.hostname,
           ti.worker_job_id, ti.log_path, v_reason
    FROM task_instance ti WHERE ti.id = p_ti_id;

    -- No INTERVAL with a fractional SECOND (MySQL rounds it): microseconds.
    UPDATE task_instance ti
    SET ti.state = v_state,
        ti.end_date = v_now,
        ti.exit_code = p_exit_code,
        ti.retry_at = CASE WHEN v_state = 'up_for_retry'
                           THEN v_now + INTERVAL ROUND(v_delay * 1000000) MICROSECOND END,
        ti.state_reason = v_reason,
        ti.updated_at = v_now
    WHERE ti.id = p_ti_id;
    RETURN v_state;
END
