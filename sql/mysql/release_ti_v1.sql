-- release_ti_v1(ti_id, try_number, reason, now): a worker that shuts down hands back a try it
-- had to interrupt. The try is recorded as `failed` with the reason in task_instance_history;
-- the TI returns to `scheduled` (its slot is released: scheduled does not count against any
-- limit) and max_tries is raised by one, so the interruption does not use up a retry.
-- Returns 'scheduled', or NULL when the report is stale (the TI is no longer running that
-- try, e.g. it was already reset as an orphan).
--
-- Lock: the task_instance row, FOR UPDATE, for the compare-and-set on (state, try_number).
-- Invariant: one history row per finished try; a late or repeated call changes nothing.
-- Callers may assume: the TI will run again (a new try) without any further call.
-- MySQL: a FUNCTION that modifies data (see heartbeat_v1 about binary logging).
CREATE FUNCTION release_ti_v1(p_ti_id BIGINT, p_try_number INT, p_reason TEXT, p_now DATETIME(6))
RETURNS VARCHAR(20)
NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    DECLARE v_now       DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_cur_state VARCHAR(20);
    DECLARE v_try       INT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_cur_state = NULL;

    SELECT ti.state, ti.try_number INTO v_cur_state, v_try
    FROM task_instance ti WHERE ti.id = p_ti_id FOR UPDATE;
    IF v_cur_state IS NULL OR v_cur_state <> 'running' OR v_try <> p_try_number THEN
        RETURN NULL;
    END IF;

    -- History first: it copies columns as they were before the hand-back.
    INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                       pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                       worker_job_id, log_path, reason)
    SELECT ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, 'failed', ti.pool, ti.pool_slots,
           ti.queued_at, ti.start_date, v_now, NULL, ti.hostname, ti.worker_job_id, ti.log_path, p_reason
    FROM task_instance ti WHERE ti.id = p_ti_id;

    UPDATE task_instance ti
    SET ti.state = 'scheduled', ti.max_tries = ti.max_tries + 1, ti.end_date = v_now, ti.exit_code = NULL,
        ti.queued_at = NULL, ti.queued_by_job_id = NULL, ti.retry_at = NULL, ti.state_reason = p_reason,
        ti.updated_at = v_now
    WHERE ti.id = p_ti_id;
    RETURN 'scheduled';
END
