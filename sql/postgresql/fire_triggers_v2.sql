-- fire_triggers_v2(trigger_ids, events, errors, finals, now, boost, max_bytes): fire_triggers_v1
-- (read sql/postgresql/fire_triggers_v1.sql: the same arguments, result, meaning and lock order),
-- with the tries its triggers end (errors and final events) decided for the whole batch in one
-- finish_tis_v2 call instead of one finish_ti_v3 call per try.
--
-- New in v2: v1 ended each such try through finish_ti_v3 (its lock, task read, history INSERT,
-- UPDATE and task_result write, and one run of the usage trigger per try: 1,000 final events in
-- one call took ~3.4x as long as 1,000 resumes). v2 hands them to finish_tis_v2 as a worker's
-- report: exit code NULL for an error (its text as the reason), 0 for a final success (the event
-- as the result; JSON null: none; over max_bytes: exit 1 and the reason says why), 1 for a final
-- failure ("the trigger ended the try as failed: <event>"). tests/test_fire_triggers.py applies
-- random batches through v1 and through the named query and compares every row they leave.
--
-- What v1 decides, unchanged:
--   error NULL, final NULL, pool with include_deferred -> `queued` (kept its place in every limit);
--   error NULL, final NULL, other pools -> `scheduled` with priority_weight = task's + boost;
--   error set -> the try fails (up_for_retry while retries remain, else failed);
--   final 'success' -> the try ends as `success` with the event as its result;
--   final 'failed' -> the try fails (exit code 1, retried if retries remain);
--   any other final, or an event jsonb refuses -> an error fire.
-- Returns (trigger_id, state) in input order: the TI's new state, NULL when the trigger had
-- already fired or its TI no longer waits on it (the trigger is marked fired either way).
--
-- Lock: the batch's trigger rows (the UPDATE that marks them fired), then their TIs' rows (the
-- UPDATEs that move them), then the task_result rows of the ended tries' TIs (finish_tis_v2):
-- always trigger before TI, as fire_trigger_v2, claim_triggers_v2 and v1. All held until the
-- caller's transaction ends.
-- Invariant: a trigger fires once (compare-and-set on fired_at IS NULL), a TI resumes or ends
-- once per deferral (compare-and-set on state 'deferred' and trigger_id); one history row per
-- ended try; no limit's usage grows.
-- Callers may assume: one call costs a fixed number of set-based statements, whatever the batch
-- holds; calling it again for the same triggers is harmless; no event, error or stored value
-- makes it raise.
CREATE OR REPLACE FUNCTION fire_triggers_v2(p_trigger_ids bigint[], p_events text[], p_errors text[],
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
    w_codes  int[];      -- as finish_tis_v2 takes them: exit code, reason, result
    w_reasons text[];
    w_results text[];
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
    -- tries a trigger ends (error, final event) to running for finish_tis_v2 below.
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
        RETURNING ti.id, f.id AS trig, ti.try_number,
                  CASE WHEN f.err IS NOT NULL THEN NULL WHEN f.fin = 'success' THEN 0 ELSE 1 END AS code,
                  CASE WHEN f.err IS NOT NULL THEN f.err
                       WHEN f.fin = 'success' THEN NULL
                       ELSE left('the trigger ended the try as failed: ' || coalesce(f.ev::text, 'null'), 4000)
                  END AS reason,
                  CASE WHEN f.err IS NULL AND f.fin = 'success' THEN nullif(f.ev, 'null'::jsonb)::text END AS result
    )
    SELECT (SELECT coalesce(array_agg(r.id), '{}') FROM resumed r), (SELECT array_agg(r.state) FROM resumed r),
           (SELECT coalesce(array_agg(e.id ORDER BY e.id), '{}') FROM ending e),
           (SELECT array_agg(e.trig ORDER BY e.id) FROM ending e),
           (SELECT array_agg(e.try_number ORDER BY e.id) FROM ending e),
           (SELECT array_agg(e.code ORDER BY e.id) FROM ending e),
           (SELECT array_agg(e.reason ORDER BY e.id) FROM ending e),
           (SELECT array_agg(e.result ORDER BY e.id) FROM ending e)
    INTO r_trigs, r_states, w_ids, w_trigs, w_tries, w_codes, w_reasons, w_results;

    -- Errors and final events: the tries end in one finish_tis_v2 call (its rules are finish_ti_v3's;
    -- it locks the TIs again, in id order, which this transaction holds already, then their
    -- results).
    IF cardinality(w_ids) > 0 THEN
        SELECT r_trigs || array_agg(w.trig ORDER BY w.id), r_states || array_agg(f.state ORDER BY w.id)
        INTO r_trigs, r_states
        FROM finish_tis_v2(w_ids, w_tries, w_codes, NULL, w_reasons, w_results, v_now, p_max_bytes) AS f
        JOIN unnest(w_ids, w_trigs) AS w(id, trig) ON w.id = f.ti_id;
    END IF;

    RETURN QUERY
    SELECT u.id, r.st
    FROM unnest(p_trigger_ids) WITH ORDINALITY AS u(id, i)
    LEFT JOIN unnest(r_trigs, r_states) AS r(trig, st) ON r.trig = u.id
    ORDER BY u.i;
END;
$$;
