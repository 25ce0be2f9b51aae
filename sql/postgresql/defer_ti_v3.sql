-- defer_ti_v3: defer_ti_v2 that also takes the Defer of a PREEMPTED try (docs/priority.md,
-- "A preempted task that defers"): a TI in `preempting` (preempt_v1 chose it; its worker sent
-- SIGTERM, and the task's SIGTERM handler raised Defer) with the same try_number becomes
-- `deferred` as a running one would (trigger row, next_method, next_kwargs: its progress is
-- kept; the same try goes on when the trigger fires), with a state_change row ('preempted',
-- preempting -> deferred). The preemption uses no retry, as when heartbeat_v3 puts a stopped
-- victim back to `scheduled`.
-- The rule for pools with include_deferred: there a deferred TI keeps holding its slot, so a
-- victim that deferred would never free the slot it was preempted for. Its Defer is refused
-- (NULL, as a stale report): the worker no longer lists the try and heartbeat_v3 puts the TI
-- back to `scheduled` like any stopped victim (its progress is lost, its slot freed). In a
-- pool without include_deferred the deferred TI holds no slot: the slot it frees is kept by
-- the preemptor's reservation (queue_tis_v4), and the resume competes later with the boost
-- fire_trigger_v2 gives it.
-- Same arguments and result as v2; its error messages name defer_ti_v3.
-- Lock: as v2, the task_instance row (FOR UPDATE), then the pool row is read (no lock).
-- v2's description follows.
-- defer_ti_v3(ti_id, try_number, classpath, trigger_kwargs, method, next_kwargs, timeout_s, now):
-- a worker reports that a running try raised Defer. The database writes a `trigger` row
-- (classpath "module.path:Class", its kwargs, created_at = now, timeout_at = now + timeout_s or
-- NULL, no triggerer yet) and the TI becomes `deferred` with trigger_id, next_method and
-- next_kwargs. The try goes on (same try_number) when the trigger fires: fire_trigger_v2.
-- Returns 'deferred', or NULL when the report is stale (the TI is no longer running that try).
-- Slots: the worker's slot is free (its process has exited). In a pool with include_deferred
-- the TI keeps counting against every limit (view limit_usage), elsewhere against none.
--
-- New in v2: it checks its arguments before anything else and refuses a bad one with a one-line
-- user error (SQLSTATE P0001) that names it, instead of failing with a data error:
--   classpath  'module.path:Class' text, at most 4,000 characters;
--   method     1-250 characters (MAX_ID_LENGTH);
--   kwargs     trigger_kwargs and next_kwargs are JSON text of an object (NULL: {}); NaN,
--              Infinity, a NUL (\u0000) or anything else jsonb refuses is refused;
--   timeout_s  NULL (waits for ever) or finite within [0, 3,153,600,000] (engine/validate.py
--              MAX_SECONDS, so now + timeout fits every timestamp); NaN and 1e300 are refused.
-- The worker turns a refused report into a failed try with the reason (finish_ti_v2). The kwargs
-- parameters are text (the named query no longer casts them), so bad JSON reaches these checks.
--
-- Lock: the task_instance row, FOR UPDATE, for the compare-and-set on (state, try_number).
-- Invariant: running (or, from v3, preempting outside include_deferred pools) -> deferred only;
-- never adds to a limit's usage; every stored timeout_at
-- is within now + MAX_SECONDS.
-- Callers may assume: a repeated or late report changes nothing and creates no trigger; a bad
-- argument changes nothing either.
CREATE OR REPLACE FUNCTION defer_ti_v3(p_ti_id bigint, p_try_number int, p_classpath text, p_trigger_kwargs text,
                                       p_method text, p_next_kwargs text, p_timeout_s double precision,
                                       p_now timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := coalesce(p_now, now());
    v_state   text;
    v_try     int;
    v_trigger bigint;
    v_kwargs  jsonb;
    v_next    jsonb;
    v_what    text;
BEGIN
    IF p_classpath IS NULL OR p_classpath NOT LIKE '%_:_%' OR length(p_classpath) > 4000 THEN
        RAISE EXCEPTION 'defer_ti_v3: bad trigger classpath %; use ''module.path:Class'' (at most 4000 characters)',
            quote_literal(regexp_replace(left(coalesce(p_classpath, 'NULL'), 60), '[[:cntrl:]]', '?', 'g'));
    END IF;
    IF p_method IS NULL OR length(p_method) NOT BETWEEN 1 AND 250 THEN
        RAISE EXCEPTION 'defer_ti_v3: bad method %; use the name of a method, 1-250 characters',
            quote_literal(regexp_replace(left(coalesce(p_method, 'NULL'), 60), '[[:cntrl:]]', '?', 'g'));
    END IF;
    -- NaN ranks above every number in PostgreSQL, so NOT (NaN <= max) refuses it with Infinity.
    IF p_timeout_s IS NOT NULL AND NOT (p_timeout_s >= 0 AND p_timeout_s <= 3153600000) THEN
        RAISE EXCEPTION 'defer_ti_v3: bad timeout % s; use none or 0 to 3153600000 seconds', p_timeout_s;
    END IF;
    BEGIN
        v_what := 'trigger kwargs';
        v_kwargs := coalesce(p_trigger_kwargs, '{}')::jsonb;
        v_what := 'next kwargs';
        v_next := coalesce(p_next_kwargs, '{}')::jsonb;
    EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION 'defer_ti_v3: % are not plain JSON (%); use a JSON object without NaN, Infinity or NUL',
            v_what, regexp_replace(SQLERRM, '\s+', ' ', 'g');
    END;
    IF jsonb_typeof(v_kwargs) <> 'object' OR jsonb_typeof(v_next) <> 'object' THEN
        RAISE EXCEPTION 'defer_ti_v3: % must be a JSON object, got a JSON %',
            CASE WHEN jsonb_typeof(v_kwargs) <> 'object' THEN 'trigger kwargs' ELSE 'next kwargs' END,
            CASE WHEN jsonb_typeof(v_kwargs) <> 'object' THEN jsonb_typeof(v_kwargs) ELSE jsonb_typeof(v_next) END;
    END IF;

    SELECT ti.state, ti.try_number INTO v_state, v_try FROM task_instance ti WHERE ti.id = p_ti_id FOR UPDATE;
    IF NOT FOUND OR v_state NOT IN ('running', 'preempting') OR v_try <> p_try_number THEN
        RETURN NULL;
    END IF;
    IF v_state = 'preempting' AND EXISTS (SELECT 1 FROM task_instance ti JOIN pool p ON p.name = ti.pool
                                          WHERE ti.id = p_ti_id AND p.include_deferred) THEN
        RETURN NULL;   -- deferred, it would keep the slot it was preempted for: heartbeat_v3 reschedules it
    END IF;

    INSERT INTO trigger (classpath, kwargs, ti_id, created_at, timeout_at)
    VALUES (p_classpath, v_kwargs, p_ti_id, v_now,
            CASE WHEN p_timeout_s IS NOT NULL THEN v_now + make_interval(secs => p_timeout_s) END)
    RETURNING id INTO v_trigger;

    UPDATE task_instance ti
    SET state = 'deferred', trigger_id = v_trigger, next_method = p_method, next_kwargs = v_next,
        updated_at = v_now, state_reason = 'deferred: waiting for ' || p_classpath
    WHERE ti.id = p_ti_id;
    IF v_state = 'preempting' THEN
        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        SELECT v_now, 'preempted', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, 'preempting',
               'deferred', 'the preempted try deferred: its progress is kept'
        FROM task_instance ti WHERE ti.id = p_ti_id;
    END IF;
    RETURN 'deferred';
END;
$$;
