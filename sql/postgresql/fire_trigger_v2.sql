-- fire_trigger_v2(trigger_id, event, error, now, boost): a trigger ended; the database decides
-- what happens to its deferred TI and returns the TI's new state (NULL: the trigger had already
-- fired, or its TI no longer waits on it; the trigger is marked fired either way).
--   error NULL, pool with include_deferred -> `queued` at once: the TI kept its place in every
--                      limit while deferred (limit_usage), so queuing it adds to no count and it
--                      never competes in queue_tis again;
--   error NULL, other pools                -> `scheduled` with priority_weight = its task's
--                      priority_weight + boost (setting resume_priority_boost; not cumulative
--                      over several deferrals): queue_tis takes it ahead of new work of
--                      the same pool, as soon as a slot is free;
--   error set (the trigger raised, or its timeout passed) -> the try fails through
--                      finish_ti_v2 (up_for_retry while retries remain, else failed; history).
-- Paused and draining DAGs resume too: the resume path never looks at is_paused/is_draining.
-- next_method/next_kwargs stay set until a worker claims the resume (claim_tis_v1); on the
-- failure path they are cleared, so a retry starts from the beginning.
--
-- Lock: the trigger row, then the task_instance row, FOR UPDATE (always in that order).
-- Invariant: a trigger fires once (compare-and-set on fired_at IS NULL); a TI resumes once
-- per deferral (compare-and-set on state 'deferred' and trigger_id). No limit's usage grows.
-- Callers may assume: calling it twice, or for a trigger nobody waits on, is harmless; no
-- event, error or stored value makes it raise.
--
-- New in v2: the event is JSON text, parsed here: text jsonb refuses (NaN, Infinity, a NUL as
-- \u0000, not JSON at all) fires the trigger with an error instead ("the trigger's event is
-- not plain JSON (...)"), so the try fails with that reason and nothing else does. The error
-- text is cut to 4,000 characters. The failure path goes through finish_ti_v2 (the retry delay
-- is clamped), and the boosted priority is clamped to the int range on both sides.
CREATE OR REPLACE FUNCTION fire_trigger_v2(p_trigger_id bigint, p_event text, p_error text,
                                           p_now timestamptz DEFAULT NULL, p_boost int DEFAULT 1000)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := coalesce(p_now, now());
    v_ti    bigint;
    v       record;
    v_event jsonb;
    v_error text := left(p_error, 4000);
BEGIN
    IF p_event IS NOT NULL THEN
        BEGIN
            v_event := p_event::jsonb;
        EXCEPTION WHEN OTHERS THEN
            v_error := left(coalesce(v_error || '; ', '') || 'the trigger''s event is not plain JSON ('
                            || regexp_replace(SQLERRM, '\s+', ' ', 'g') || ')', 4000);
        END;
    END IF;
    SELECT g.ti_id INTO v_ti FROM trigger g WHERE g.id = p_trigger_id AND g.fired_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE trigger SET fired_at = v_now, event = v_event, error = v_error WHERE id = p_trigger_id;

    SELECT ti.id, ti.try_number, ti.dag_id, ti.task_id, ti.pool INTO v
    FROM task_instance ti
    WHERE ti.id = v_ti AND ti.state = 'deferred' AND ti.trigger_id = p_trigger_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;

    IF v_error IS NOT NULL THEN
        UPDATE task_instance SET state = 'running', next_method = NULL, next_kwargs = NULL WHERE id = v.id;
        RETURN finish_ti_v2(v.id, v.try_number, NULL, false, v_error, v_now);
    END IF;

    IF coalesce((SELECT p.include_deferred FROM pool p WHERE p.name = v.pool), false) THEN
        UPDATE task_instance
        SET state = 'queued', queued_at = v_now, queued_by_job_id = NULL, updated_at = v_now,
            state_reason = 'resumed: trigger fired; kept its slot'
        WHERE id = v.id;
        RETURN 'queued';
    END IF;
    UPDATE task_instance ti
    SET state = 'scheduled', queued_at = NULL, queued_by_job_id = NULL, updated_at = v_now,
        priority_weight = greatest(least(coalesce((SELECT t.priority_weight FROM task t
                                                   WHERE t.dag_id = v.dag_id AND t.task_id = v.task_id),
                                                  ti.priority_weight)::bigint + coalesce(p_boost, 0), 2147483647),
                                   -2147483648),
        state_reason = 'resumed: trigger fired; waits for a slot with priority boost ' || coalesce(p_boost, 0)
    WHERE ti.id = v.id;
    RETURN 'scheduled';
END;
$$;
