-- claim_triggers_v2(job_id, limit, threshold_s, now): one pass of a triggerer (job `job_id`).
--   1. Timeouts: every waiting trigger whose timeout_at has passed (database clock), whoever
--      runs it, fires with an error through fire_trigger_v2: its TI's try fails (retried if
--      retries remain).
--   2. Dead triggerers: triggerer jobs still `running` whose heartbeat is older than
--      threshold_s become `failed` (as reset_orphans_v2 does for every kind of job), so a
--      triggerer that stalled learns it from heartbeat_v1 and drops what it ran.
--   3. Claim: up to `limit` waiting triggers (fired_at NULL) whose TI still waits on them and
--      that nobody alive runs (triggerer_job_id NULL, or a job that is not running or whose
--      heartbeat is older than threshold_s) become the caller's. Triggers of a triggerer that
--      died are taken over this way. Triggers whose TI no longer waits on them are closed
--      (fired_at set, error says why) instead.
-- Returns the triggers claimed now: (trigger_id, classpath, kwargs, created_at, fileloc of
-- the DAG, for importing user triggers). What the caller already ran is not returned again:
-- it reads its own (query owned_triggers) to drop triggers that fired elsewhere or were taken.
--
-- Lock: the trigger rows, FOR UPDATE SKIP LOCKED: triggerers never wait for each other nor
-- take the same trigger at once. Timeouts take trigger then TI rows, like fire_trigger_v2.
-- Invariant: a trigger has at most one live owner; a trigger fires at most once
-- (fire_trigger_v2 is a compare-and-set), so a takeover can run a trigger twice but never
-- resume its TI twice.
-- Callers may assume: no value stored in a trigger, TI or task makes it raise.
--
-- New in v2: timeouts fire through fire_trigger_v2 (whose failure path, finish_ti_v2, clamps
-- the retry delay), each in its own subtransaction (BEGIN ... EXCEPTION): one that still
-- fails is rolled back and recorded against its TI (state_reason; the trigger stays waiting and
-- is tried again next pass) and its DAG (dag.error_step = 'claim_triggers', error = one line
-- naming the trigger and TI, error_at = now), and the other triggers go on. A DAG's
-- claim_triggers error is cleared when a timeout of that DAG next fires. threshold_s is
-- clamped into [0, 3,153,600,000 s] (engine/validate.py MAX_SECONDS).
CREATE OR REPLACE FUNCTION claim_triggers_v2(p_job_id bigint, p_limit int, p_threshold_s double precision,
                                             p_now timestamptz DEFAULT NULL)
RETURNS TABLE (trigger_id bigint, classpath text, kwargs jsonb, created_at timestamptz, fileloc text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := coalesce(p_now, now());
    v_cutoff timestamptz := coalesce(p_now, now())
                            - make_interval(secs => least(greatest(coalesce(p_threshold_s, 0), 0), 3153600000));
    r        record;
    v_bad    text[] := '{}';  -- DAGs with a timeout that failed in this call
    v_msg    text;
BEGIN
    -- 1. Timeouts, each in its own subtransaction.
    FOR r IN
        SELECT g.id, g.ti_id, ti.dag_id, extract(epoch FROM g.timeout_at - g.created_at) AS secs
        FROM trigger g
        LEFT JOIN task_instance ti ON ti.id = g.ti_id
        WHERE g.fired_at IS NULL AND g.timeout_at <= v_now
        ORDER BY g.id
        FOR UPDATE OF g SKIP LOCKED
    LOOP
        BEGIN
            IF fire_trigger_v2(r.id, NULL, format('trigger timed out (timeout %s s)', round(r.secs::numeric, 3)),
                               v_now) IS NOT NULL THEN
                UPDATE dag SET error_step = NULL, error = NULL, error_at = NULL
                WHERE dag.dag_id = r.dag_id AND dag.error_step = 'claim_triggers' AND NOT dag.dag_id = ANY (v_bad);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            v_msg := left(regexp_replace(format('could not fire timed-out trigger %s of TI %s: %s [SQLSTATE %s]',
                                                r.id, r.ti_id, SQLERRM, SQLSTATE), '\s+', ' ', 'g'), 4000);
            v_bad := v_bad || coalesce(r.dag_id, '');
            UPDATE dag SET error_step = 'claim_triggers', error = v_msg, error_at = v_now WHERE dag.dag_id = r.dag_id;
            UPDATE task_instance SET state_reason = left('claim_triggers: ' || v_msg, 4000) WHERE id = r.ti_id;
        END;
    END LOOP;

    -- 2. Dead triggerers.
    UPDATE job j SET state = 'failed', end_date = v_now
    WHERE j.kind = 'triggerer' AND j.state = 'running' AND j.latest_heartbeat < v_cutoff
      AND j.id IS DISTINCT FROM p_job_id;

    -- 3. Close triggers nobody waits on any more, then claim.
    UPDATE trigger g SET fired_at = v_now, error = 'task instance no longer waits on this trigger'
    WHERE g.id IN (
        SELECT g2.id FROM trigger g2
        WHERE g2.fired_at IS NULL
          AND NOT EXISTS (SELECT 1 FROM task_instance ti
                          WHERE ti.id = g2.ti_id AND ti.state = 'deferred' AND ti.trigger_id = g2.id)
          AND (g2.triggerer_job_id IS NULL
               OR NOT EXISTS (SELECT 1 FROM job j WHERE j.id = g2.triggerer_job_id AND j.state = 'running'
                                                    AND j.latest_heartbeat >= v_cutoff))
        FOR UPDATE SKIP LOCKED);

    RETURN QUERY
    WITH taken AS (
        SELECT g.id FROM trigger g
        WHERE g.fired_at IS NULL
          AND (g.triggerer_job_id IS NULL
               OR NOT EXISTS (SELECT 1 FROM job j WHERE j.id = g.triggerer_job_id AND j.state = 'running'
                                                    AND j.latest_heartbeat >= v_cutoff))
        ORDER BY g.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE trigger g SET triggerer_job_id = p_job_id
    FROM taken t
    WHERE g.id = t.id AND g.fired_at IS NULL
    RETURNING g.id, g.classpath, g.kwargs, g.created_at,
              (SELECT d.fileloc FROM task_instance ti JOIN dag d ON d.dag_id = ti.dag_id WHERE ti.id = g.ti_id);
END;
$$;
