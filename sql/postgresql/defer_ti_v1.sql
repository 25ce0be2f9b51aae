-- defer_ti_v1(ti_id, try_number, classpath, trigger_kwargs, method, next_kwargs, timeout_s, now):
-- a worker reports that a running try raised Defer. The database writes a `trigger` row
-- (classpath "module.path:Class", its kwargs, created_at = now, timeout_at = now + timeout_s or
-- NULL, no triggerer yet) and the TI becomes `deferred` with trigger_id, next_method and
-- next_kwargs. The try goes on (same try_number) when the trigger fires: fire_trigger_v1.
-- Returns 'deferred', or NULL when the report is stale (the TI is no longer running that try).
-- Slots: the worker's slot is free (its process has exited). In a pool with include_deferred
-- the TI keeps counting against every limit (view limit_usage), elsewhere against none.
--
-- Lock: the task_instance row, FOR UPDATE, for the compare-and-set on (state, try_number).
-- Invariant: running -> deferred only; never adds to a limit's usage.
-- Callers may assume: a repeated or late report changes nothing and creates no trigger.
CREATE OR REPLACE FUNCTION defer_ti_v1(p_ti_id bigint, p_try_number int, p_classpath text, p_trigger_kwargs jsonb,
                                       p_method text, p_next_kwargs jsonb, p_timeout_s double precision,
                                       p_now timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := coalesce(p_now, now());
    v_state   text;
    v_try     int;
    v_trigger bigint;
BEGIN
    IF p_classpath IS NULL OR p_classpath NOT LIKE '%_:_%' OR p_method IS NULL OR p_method = '' THEN
        RAISE EXCEPTION 'defer_ti_v1: a trigger classpath ''module:Class'' and a method are required (got % and %)',
            p_classpath, p_method;
    END IF;
    SELECT ti.state, ti.try_number INTO v_state, v_try FROM task_instance ti WHERE ti.id = p_ti_id FOR UPDATE;
    IF NOT FOUND OR v_state <> 'running' OR v_try <> p_try_number THEN
        RETURN NULL;
    END IF;

    INSERT INTO trigger (classpath, kwargs, ti_id, created_at, timeout_at)
    VALUES (p_classpath, coalesce(p_trigger_kwargs, '{}'::jsonb), p_ti_id, v_now,
            CASE WHEN p_timeout_s IS NOT NULL THEN v_now + make_interval(secs => p_timeout_s) END)
    RETURNING id INTO v_trigger;

    UPDATE task_instance ti
    SET state = 'deferred', trigger_id = v_trigger, next_method = p_method,
        next_kwargs = coalesce(p_next_kwargs, '{}'::jsonb), updated_at = v_now,
        state_reason = 'deferred: waiting for ' || p_classpath
    WHERE ti.id = p_ti_id;
    RETURN 'deferred';
END;
$$;
