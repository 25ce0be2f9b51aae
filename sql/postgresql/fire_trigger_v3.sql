-- fire_trigger_v3(trigger_id, event, error, now, boost): fire_trigger_v2 (read
-- sql/postgresql/fire_trigger_v2.sql: the same arguments, result and meaning) with one change, a
-- fix: THE RESUME READS ITS POOL'S include_deferred IN THE STATEMENT THAT MOVES THE TI.
--   v2 read the flag by a statement of its own, then moved the TI by an UPDATE. A change of the
--   flag holds task_instance in SHARE mode until it commits (track_pool_usage_v2), so that UPDATE
--   waited for it, but the flag had been read before the wait: with include_deferred turned off
--   (the deferred TI's slot freed, and given to another TI), the TI was queued "keeping its
--   slot" it no longer had, past the pool's limit (tests/test_deferral.py, "a resume racing a
--   change of its pool's include_deferred"). Here one UPDATE reads the flag and moves the TI: it
--   takes its lock on task_instance before its snapshot, so it sees what the change committed.
--
-- Returns the TI's new state: `queued` (pool with include_deferred: it kept its place in every
-- limit), `scheduled` (other pools, priority_weight = task's + boost), or through finish_ti_v2
-- `up_for_retry` / `failed` (error set); NULL when the trigger had already fired or its TI no
-- longer waits on it (the trigger is marked fired either way).
--
-- Lock: the trigger row, then the task_instance row, FOR UPDATE (always in that order); the
-- resume's UPDATE waits for a change of include_deferred in flight (task_instance SHARE).
-- Invariant: a trigger fires once (compare-and-set on fired_at IS NULL); a TI resumes once per
-- deferral (compare-and-set on state 'deferred' and trigger_id). No limit's usage grows: a TI
-- goes `queued` only when its pool counts deferred TIs as the statement moving it sees the pool.
-- Callers may assume: calling it twice, or for a trigger nobody waits on, is harmless; no event,
-- error or stored value makes it raise.
CREATE OR REPLACE FUNCTION fire_trigger_v3(p_trigger_id bigint, p_event text, p_error text,
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
    v_state text;
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

    SELECT ti.id, ti.try_number, ti.pool INTO v
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

    -- The flag and the move in one statement (its snapshot is taken after its table lock). The TI
    -- row is locked above: its pool cannot change.
    UPDATE task_instance ti
    SET state = CASE WHEN k.keeps THEN 'queued' ELSE 'scheduled' END,
        queued_at = CASE WHEN k.keeps THEN v_now END,
        queued_by_job_id = NULL, updated_at = v_now,
        priority_weight = CASE WHEN k.keeps THEN ti.priority_weight ELSE
            greatest(least(coalesce((SELECT t.priority_weight FROM task t
                                     WHERE t.dag_id = ti.dag_id AND t.task_id = ti.task_id),
                                    ti.priority_weight)::bigint + coalesce(p_boost, 0), 2147483647),
                     -2147483648) END,
        state_reason = CASE WHEN k.keeps THEN 'resumed: trigger fired; kept its slot'
                            ELSE 'resumed: trigger fired; waits for a slot with priority boost ' || coalesce(p_boost, 0)
                       END
    FROM (SELECT coalesce((SELECT p.include_deferred FROM pool p WHERE p.name = v.pool), false) AS keeps) k
    WHERE ti.id = v.id
    RETURNING ti.state INTO v_state;
    RETURN v_state;
END;
$$;
