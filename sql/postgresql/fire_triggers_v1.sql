-- fire_triggers_v1(trigger_ids, events, errors, finals, now, boost, max_bytes): a batch of ended
-- triggers, reported by a triggerer in one call (arrays of the same length, element i for
-- trigger i; ids distinct). The database decides what happens to each trigger's deferred TI,
-- as fire_trigger_v2 does for one, and returns (trigger_id, state): the TI's new state, NULL
-- when the trigger had already fired or its TI no longer waits on it (the trigger is marked
-- fired either way).
--   error NULL, final NULL, pool with include_deferred -> `queued` (kept its place in every
--       limit while deferred: no count grows);
--   error NULL, final NULL, other pools -> `scheduled` with priority_weight = task's + boost;
--   error set (the trigger raised, could not load, timed out, or its event is not plain JSON)
--       -> the try fails through finish_ti_v3 (up_for_retry while retries remain, else failed);
--   final 'success' -> the try ends as `success` through finish_ti_v3 with the event as its
--       result (task_result; JSON null: no result; an event over max_bytes fails the try), no
--       worker round trip: downstream trigger rules apply on the next schedule_tis pass;
--   final 'failed' -> the try fails through finish_ti_v3 (exit code 1, retried if retries
--       remain) with the reason "the trigger ended the try as failed: <event>";
--   any other final -> an error fire ("unknown final state ...").
-- Events are JSON text: text jsonb refuses (NaN, Infinity, \u0000) turns that trigger's fire
-- into an error fire, and only that one's (the batch is parsed at once; only when that fails
-- is each event parsed alone). Errors are cut to 4,000 characters.
--
-- Lock: the batch's trigger rows (the UPDATE that marks them fired), then their TIs' rows (the
-- UPDATEs that move them): always trigger before TI, as fire_trigger_v2 and claim_triggers_v2.
-- A TI is reached only through its trigger's row, so two triggerers firing the same trigger
-- (a takeover) meet on the trigger row, and the second finds it fired.
-- Invariant: as fire_trigger_v2: a trigger fires once (compare-and-set on fired_at IS NULL), a
-- TI resumes or ends once per deferral (compare-and-set on state 'deferred' and trigger_id);
-- no limit's usage grows (queued only from an include_deferred pool; success/failed release).
-- Callers may assume: one call costs one set-based statement (each trigger and TI row written
-- once) plus one finish_ti_v3 call per finishing TI (errors and final events); calling it
-- again for the same triggers is harmless; no event, error or stored value makes it raise.
CREATE OR REPLACE FUNCTION fire_triggers_v1(p_trigger_ids bigint[], p_events text[], p_errors text[],
                                            p_finals text[], p_now timestamptz DEFAULT NULL,
                                            p_boost int DEFAULT 1000, p_max_bytes int DEFAULT NULL)
RETURNS TABLE (trigger_id bigint, state text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := coalesce(p_now, now());
    v_n      int := coalesce(cardinality(p_trigger_ids), 0);
    v_events jsonb[];
    v_errors text[] := p_errors;
    v_finals text[] := p_finals;
    w_ids    bigint[];   -- the TIs whose try a trigger of the batch ends, in id order, and theirs:
    w_trigs  bigint[];
    w_tries  int[];
    w_evs    jsonb[];
    w_errs   text[];
    w_fins   text[];
    r_trigs  bigint[];   -- (trigger, the TI's new state) of every TI moved
    r_states text[];
BEGIN
    -- Events: the whole batch at once; one by one only when some event is not plain JSON.
    BEGIN
        SELECT coalesce(array_agg(u.e::jsonb ORDER BY u.i), '{}') INTO v_events
        FROM unnest(p_events) WITH ORDINALITY AS u(e, i);
    EXCEPTION WHEN OTHERS THEN
        v_events := '{}';
        FOR i IN 1 .. v_n LOOP
            BEGIN
                v_events[i] := p_events[i]::jsonb;
            EXCEPTION WHEN OTHERS THEN
                v_events[i] := NULL;
                v_errors[i] := coalesce(v_errors[i] || '; ', '') || 'the trigger''s event is not plain JSON ('
                               || regexp_replace(SQLERRM, '\s+', ' ', 'g') || ')';
            END;
        END LOOP;
    END;
    FOR i IN 1 .. v_n LOOP
        IF v_finals[i] IS NOT NULL AND v_finals[i] NOT IN ('success', 'failed') THEN
            v_errors[i] := coalesce(v_errors[i] || '; ', '') || format('unknown final state %L; use success or failed',
                                                                     left(v_finals[i], 100));
            v_finals[i] := NULL;
        END IF;
    END LOOP;

    -- One statement: mark the triggers fired (the UPDATE locks their rows, in the order of the
    -- primary key index), then move their TIs that still wait on them (compare-and-set on
    -- 'deferred' and trigger_id): resumes to queued (kept slot) or scheduled (boost), and the
    -- tries a trigger ends (error, final event) to running for finish_ti_v3 below.
    WITH input AS (
        SELECT u.id, v_events[u.i] AS ev, left(v_errors[u.i], 4000) AS err, v_finals[u.i] AS fin
        FROM unnest(p_trigger_ids) WITH ORDINALITY AS u(id, i)
    ), fired AS (
        UPDATE trigger g SET fired_at = v_now, event = i.ev, error = i.err
        FROM input i
        WHERE g.id = i.id AND g.fired_at IS NULL
        RETURNING g.id, g.ti_id, i.ev, i.err, i.fin
    ), resumed AS (
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
                                ELSE 'resumed: trigger fired; waits for a slot with priority boost '
                                     || coalesce(p_boost, 0) END
        FROM fired f
        CROSS JOIN LATERAL (SELECT coalesce((SELECT p.include_deferred FROM pool p
                                             WHERE p.name = (SELECT x.pool FROM task_instance x WHERE x.id = f.ti_id)),
                                            false) AS keeps) k
        WHERE ti.id = f.ti_id AND ti.state = 'deferred' AND ti.trigger_id = f.id AND f.err IS NULL AND f.fin IS NULL
        RETURNING f.id, ti.state
    ), ending AS (
        UPDATE task_instance ti SET state = 'running', next_method = NULL, next_kwargs = NULL
        FROM fired f
        WHERE ti.id = f.ti_id AND ti.state = 'deferred' AND ti.trigger_id = f.id
          AND (f.err IS NOT NULL OR f.fin IS NOT NULL)
        RETURNING ti.id, f.id AS trig, ti.try_number, f.ev, f.err, f.fin
    )
    SELECT (SELECT coalesce(array_agg(r.id), '{}') FROM resumed r), (SELECT array_agg(r.state) FROM resumed r),
           (SELECT coalesce(array_agg(e.id ORDER BY e.id), '{}') FROM ending e),
           (SELECT array_agg(e.trig ORDER BY e.id) FROM ending e),
           (SELECT array_agg(e.try_number ORDER BY e.id) FROM ending e),
           (SELECT array_agg(e.ev ORDER BY e.id) FROM ending e),
           (SELECT array_agg(e.err ORDER BY e.id) FROM ending e),
           (SELECT array_agg(e.fin ORDER BY e.id) FROM ending e)
    INTO r_trigs, r_states, w_ids, w_trigs, w_tries, w_evs, w_errs, w_fins;

    -- Errors and final events: each try ends through finish_ti_v3 (history, retries, result).
    FOR i IN 1 .. cardinality(w_ids) LOOP
        r_trigs := r_trigs || w_trigs[i];
        r_states := r_states || CASE
            WHEN w_errs[i] IS NOT NULL THEN finish_ti_v3(w_ids[i], w_tries[i], NULL, false, w_errs[i], v_now)
            WHEN w_fins[i] = 'success' THEN finish_ti_v3(w_ids[i], w_tries[i], 0, false, NULL, v_now,
                                                         nullif(w_evs[i], 'null'::jsonb)::text, p_max_bytes)
            ELSE finish_ti_v3(w_ids[i], w_tries[i], 1, false,
                              left('the trigger ended the try as failed: ' || coalesce(w_evs[i]::text, 'null'), 4000),
                              v_now) END;
    END LOOP;

    RETURN QUERY
    SELECT u.id, r.st
    FROM unnest(p_trigger_ids) WITH ORDINALITY AS u(id, i)
    LEFT JOIN unnest(r_trigs, r_states) AS r(trig, st) ON r.trig = u.id
    ORDER BY u.i;
END;
$$;
