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
CREATE OR REPLACE FUNCTION release_ti_v1(p_ti_id bigint, p_try_number int, p_reason text,
                                         p_now timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v     record;
BEGIN
    SELECT ti.* INTO v FROM task_instance ti WHERE ti.id = p_ti_id FOR UPDATE;
    IF NOT FOUND OR v.state <> 'running' OR v.try_number <> p_try_number THEN
        RETURN NULL;
    END IF;

    UPDATE task_instance ti
    SET state = 'scheduled', max_tries = ti.max_tries + 1, end_date = v_now, exit_code = NULL,
        queued_at = NULL, queued_by_job_id = NULL, retry_at = NULL, state_reason = p_reason, updated_at = v_now
    WHERE ti.id = p_ti_id;

    INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                       pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                       worker_job_id, log_path, reason)
    VALUES (v.id, v.dag_id, v.run_id, v.task_id, v.map_index, v.try_number, 'failed', v.pool, v.pool_slots,
            v.queued_at, v.start_date, v_now, NULL, v.hostname, v.worker_job_id, v.log_path, p_reason);
    RETURN 'scheduled';
END;
$$;
