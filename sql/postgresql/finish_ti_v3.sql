-- finish_ti_v3(ti_id, try_number, exit_code, timed_out, reason, now, result, max_bytes):
-- finish_ti_v2 (below) plus the try's result. `result` is JSON text (a PythonTask's return value, or a final
-- trigger event's payload: fire_triggers_v1); on `success` it is stored in task_result in the
-- same transaction as the state, replacing what an earlier try of the TI left there. Text
-- jsonb refuses (NaN, Infinity, \u0000, not JSON at all) fails the try instead, with the
-- reason "the task's result is not plain JSON (...)" (retried if retries remain); so does a
-- result of more than p_max_bytes bytes (NULL: no limit here; the worker checks the setting
-- max_result_bytes before it reports). Any try that does not end in success removes the TI's
-- stored result: a downstream task never reads the value of a try that did not succeed.
--
-- As finish_ti_v2: a worker reports how a try ended (fire_triggers_v1 reports for a try a
-- final trigger event ends); the database decides what it means and returns the new state (NULL when the report is stale:
-- the TI is no longer running that try, e.g. it was reset as an orphan).
--   exit 0                 -> success
--   exit 99 (not timed out)-> skipped (Airflow's skip_on_exit_code; PythonTask raises SkipTask)
--   otherwise              -> up_for_retry while try_number <= max_tries, with retry_at =
--                             now + delay, else failed. delay = retry_delay, or with
--                             exponential backoff retry_delay * 2^(try_number - 1) capped by
--                             max_retry_delay (default one day).
-- The pool slot is released by the state change itself (usage counts queued/running/deferred).
--
-- New in v2: no value of the task row can make it fail. The delay is clamped into
-- [0, 3,153,600,000 s] (engine/validate.py MAX_SECONDS, 100 years: now + delay fits every
-- timestamp of both dialects), NaN and infinities included; the backoff exponent is capped at
-- 64 (2^64 times any clamped delay is a finite double); a missing task row means the column
-- defaults (retry_delay 300 s, no backoff) instead of a try that can never end. Any reason
-- text is accepted: it is cut to 4,000 characters (PostgreSQL text cannot hold NUL, so there
-- is none to strip here; the MySQL version strips it).
--
-- Lock: the task_instance row, FOR UPDATE, for the compare-and-set on (state, try_number); the
-- TI's task_result row (written or deleted) after it.
-- Invariant: one history row per finished try; a late or repeated report changes nothing;
-- a task_result row belongs to a TI in state success (until the TI is cleared or re-run);
-- retry_at of an up_for_retry TI is within now + MAX_SECONDS.
-- Callers may assume: it raises for no value stored in task or task_instance.
CREATE OR REPLACE FUNCTION finish_ti_v3(p_ti_id bigint, p_try_number int, p_exit_code int,
                                        p_timed_out boolean DEFAULT false, p_reason text DEFAULT NULL,
                                        p_now timestamptz DEFAULT NULL, p_result text DEFAULT NULL,
                                        p_max_bytes int DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    c_max_s  CONSTANT double precision := 3153600000;  -- engine/validate.py MAX_SECONDS
    v_now    timestamptz := coalesce(p_now, now());
    v_timed  boolean := coalesce(p_timed_out, false);
    v_reason text := CASE WHEN coalesce(p_timed_out, false) THEN 'execution_timeout exceeded'
                          ELSE left(p_reason, 4000) END;
    v        record;
    v_state  text;
    v_delay  double precision;
    v_exit   int := p_exit_code;
    v_result jsonb;
BEGIN
    SELECT ti.*, t.retry_delay, t.retry_exponential_backoff, t.max_retry_delay
    INTO v
    FROM task_instance ti
    LEFT JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
    WHERE ti.id = p_ti_id
    FOR UPDATE OF ti;
    IF NOT FOUND OR v.state <> 'running' OR v.try_number <> p_try_number THEN
        RETURN NULL;
    END IF;

    IF NOT v_timed AND p_exit_code = 0 AND p_result IS NOT NULL THEN
        IF octet_length(p_result) > p_max_bytes THEN
            v_exit := 1;
            v_reason := format('the task''s result is %s bytes, more than max_result_bytes (%s); return less, '
                               'or store big data elsewhere and return its location', octet_length(p_result), p_max_bytes);
        ELSE
            BEGIN
                v_result := p_result::jsonb;
            EXCEPTION WHEN OTHERS THEN
                v_exit := 1;
                v_reason := left('the task''s result is not plain JSON (' || regexp_replace(SQLERRM, '\s+', ' ', 'g')
                                 || '); return dicts, lists, strings, finite numbers, booleans or None', 4000);
            END;
        END IF;
    END IF;

    IF NOT v_timed AND v_exit = 0 THEN
        v_state := 'success';
    ELSIF NOT v_timed AND v_exit = 99 THEN
        v_state := 'skipped';
    ELSIF v.try_number <= v.max_tries THEN
        v_state := 'up_for_retry';
        -- least() and greatest() rank NaN above every number: NaN and +Infinity become c_max_s.
        v_delay := least(greatest(coalesce(v.retry_delay, 300), 0), c_max_s);
        IF coalesce(v.retry_exponential_backoff, false) THEN
            v_delay := least(v_delay * power(2::double precision, greatest(least(v.try_number, 65), 1) - 1),
                             greatest(coalesce(v.max_retry_delay, 86400), 0), c_max_s);
        END IF;
    ELSE
        v_state := 'failed';
    END IF;

    UPDATE task_instance ti
    SET state = v_state,
        end_date = v_now,
        exit_code = v_exit,
        retry_at = CASE WHEN v_state = 'up_for_retry' THEN v_now + make_interval(secs => v_delay) END,
        state_reason = v_reason,
        updated_at = v_now
    WHERE ti.id = p_ti_id;

    INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                       pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                       worker_job_id, log_path, reason)
    VALUES (v.id, v.dag_id, v.run_id, v.task_id, v.map_index, v.try_number,
            CASE WHEN v_state = 'up_for_retry' THEN 'failed' ELSE v_state END,
            v.pool, v.pool_slots, v.queued_at, v.start_date, v_now, v_exit, v.hostname,
            v.worker_job_id, v.log_path, v_reason);

    IF v_state = 'success' AND v_result IS NOT NULL THEN
        INSERT INTO task_result (ti_id, try_number, value, created_at)
        VALUES (v.id, v.try_number, v_result, v_now)
        ON CONFLICT (ti_id) DO UPDATE SET try_number = excluded.try_number, value = excluded.value,
                                          created_at = excluded.created_at;
    ELSE
        DELETE FROM task_result WHERE ti_id = v.id;
    END IF;
    RETURN v_state;
END;
$$;
