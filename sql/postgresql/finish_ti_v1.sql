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
CREATE OR REPLACE FUNCTION finish_ti_v1(p_ti_id bigint, p_try_number int, p_exit_code int,
                                        p_timed_out boolean DEFAULT false, p_reason text DEFAULT NULL,
                                        p_now timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := coalesce(p_now, now());
    v       record;
    v_state text;
    v_delay double precision;
BEGIN
    SELECT ti.*, t.retry_delay, t.retry_exponential_backoff, t.max_retry_delay
    INTO v
    FROM task_instance ti
    JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
    WHERE ti.id = p_ti_id
    FOR UPDATE OF ti;
    IF NOT FOUND OR v.state <> 'running' OR v.try_number <> p_try_number THEN
        RETURN NULL;
    END IF;

    IF NOT p_timed_out AND p_exit_code = 0 THEN
        v_state := 'success';
    ELSIF NOT p_timed_out AND p_exit_code = 99 THEN
        v_state := 'skipped';
    ELSIF v.try_number <= v.max_tries THEN
        v_state := 'up_for_retry';
        v_delay := CASE WHEN v.retry_exponential_backoff
                        THEN least(v.retry_delay * power(2, v.try_number - 1), coalesce(v.max_retry_delay, 86400))
                        ELSE v.retry_delay END;
    ELSE
        v_state := 'failed';
    END IF;

    UPDATE task_instance ti
    SET state = v_state,
        end_date = v_now,
        exit_code = p_exit_code,
        retry_at = CASE WHEN v_state = 'up_for_retry' THEN v_now + make_interval(secs => v_delay) END,
        state_reason = CASE WHEN p_timed_out THEN 'execution_timeout exceeded' ELSE p_reason END,
        updated_at = v_now
    WHERE ti.id = p_ti_id;

    INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                       pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                       worker_job_id, log_path, reason)
    VALUES (v.id, v.dag_id, v.run_id, v.task_id, v.map_index, v.try_number,
            CASE WHEN v_state = 'up_for_retry' THEN 'failed' ELSE v_state END,
            v.pool, v.pool_slots, v.queued_at, v.start_date, v_now, p_exit_code, v.hostname,
            v.worker_job_id, v.log_path,
            CASE WHEN p_timed_out THEN 'execution_timeout exceeded' ELSE p_reason END);
    RETURN v_state;
END;
$$;
