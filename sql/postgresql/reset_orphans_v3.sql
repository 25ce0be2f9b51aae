-- reset_orphans_v3(threshold_s, interval_s, job_id, now): reset_orphans_v2 plus a fourth step:
--   4. tries being stopped whose worker is gone end as heartbeat_v3 ends them when a live
--      worker no longer lists them. A TI in `restarting` (cleared while running) or `preempting`
--      (a preemption victim) waits for its worker to say the try's process tree is gone; when
--      that worker job is no longer running (died, failed, or ended), or the TI has no known
--      worker job and a last_heartbeat_at older than threshold_s, nobody will say it, and the
--      tree went with the worker (supervisor: nothing of a try outlives its worker). So:
--      `restarting` -> `none` (a new try), `preempting` -> `scheduled` with max_tries + 1 (the
--      preemption uses no retry) and a task_instance_history row 'preempted'; each with a
--      state_change row whose reason names the gone worker. Under v2 such TIs stayed in
--      `restarting` / `preempting` for ever (and a victim kept its slot).
--   Same arguments and result as v2 (the step-4 TIs are not counted in tis_failed: no try
--   failed), so `procedure_versions = "reset_orphans=2"` still pins back.
-- What follows is v2's contract, unchanged.
-- reset_orphans_v3(threshold_s, interval_s, job_id, now): clean up after dead processes, at
-- most once per interval across all schedulers, without a leader.
--   1. jobs still `running` whose latest_heartbeat is older than threshold_s become `failed`
--      (end_date = now); the caller itself is never judged (it is running this);
--   2. `queued` TIs whose queued_by_job_id is a job no longer running are adopted by the
--      caller (queued_by_job_id := job_id); they stay queued, as the database queue needs;
--   3. `running` TIs whose worker job is no longer running (died, failed, or ended without
--      reporting), or that have no known worker job and a last_heartbeat_at older than
--      threshold_s, end as a failed try THROUGH finish_ti_v2 (exit code NULL), so retries,
--      history and slot release are the usual ones. The reason says why.
-- TIs whose job is alive are never touched, whatever their heartbeat: no ping-pong between
-- live schedulers or workers. Returns (ran, jobs_failed, tis_adopted, tis_failed); ran is
-- false when the check was not due.
--
-- New in v2: one orphan can no longer stop the cleanup for everyone. Each orphaned try is
-- finished in its own subtransaction (BEGIN ... EXCEPTION); when that fails, its changes are
-- rolled back, the error is recorded against the TI (state_reason; it stays running and is
-- tried again next time) and its DAG (dag.error_step = 'reset_orphans', error = one line
-- naming the TI, error_at = now), and the other orphans go on. A DAG's reset_orphans error is
-- cleared when an orphan of that DAG is next finished. finish_ti_v2 clamps the retry delay, so
-- no stored task value fails it. threshold_s and interval_s are clamped into
-- [0, 3,153,600,000 s] (engine/validate.py MAX_SECONDS; NaN counts as the maximum).
--
-- Lock: the row scheduler_lock('reset_orphans'), FOR UPDATE NOWAIT, held to commit; its
-- last_run_at is the "last done" stamp. A caller that cannot take it gets SQLSTATE 55P03
-- (lock_not_available) at once: the scheduler reports "busy" and goes on. TI rows are taken
-- FOR UPDATE SKIP LOCKED (a row being finished by its worker is that worker's to report).
-- Invariant: only jobs past the threshold by the database clock are declared dead, each
-- once (compare-and-set on state 'running' and the heartbeat, re-checked against a
-- concurrent heartbeat); each orphaned try is finished once (finish_ti_v2 is a
-- compare-and-set on running + try_number).
-- Callers may assume: calling it every tick is cheap (not due: one row lock and return);
-- a job that was declared dead learns it from heartbeat_v1 returning false; no value stored
-- in a TI or task makes it raise.
CREATE OR REPLACE FUNCTION reset_orphans_v3(p_threshold_s double precision, p_interval_s double precision,
                                            p_job_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (ran boolean, jobs_failed int, tis_adopted int, tis_failed int)
LANGUAGE plpgsql
AS $$
DECLARE
    c_max_s  CONSTANT double precision := 3153600000;  -- engine/validate.py MAX_SECONDS
    v_now    timestamptz := coalesce(p_now, now());
    v_cutoff timestamptz := coalesce(p_now, now())
                            - make_interval(secs => least(greatest(coalesce(p_threshold_s, 0), 0), c_max_s));
    v_last   timestamptz;
    v        record;
    v_jobs   int := 0;
    v_adopt  int := 0;
    v_failed int := 0;
    v_bad    text[] := '{}';  -- DAGs with an orphan that failed in this call
    v_msg    text;
BEGIN
    SELECT l.last_run_at INTO v_last FROM scheduler_lock l WHERE l.name = 'reset_orphans' FOR UPDATE NOWAIT;
    IF v_last IS NOT NULL
       AND v_last > v_now - make_interval(secs => least(greatest(coalesce(p_interval_s, 0), 0), c_max_s)) THEN
        RETURN QUERY SELECT false, 0, 0, 0;
        RETURN;
    END IF;
    UPDATE scheduler_lock SET last_run_at = v_now WHERE name = 'reset_orphans';

    -- 1. Dead jobs. A heartbeat committed meanwhile is seen by the re-check of the WHERE.
    UPDATE job j SET state = 'failed', end_date = v_now
    WHERE j.state = 'running' AND j.latest_heartbeat < v_cutoff AND j.id IS DISTINCT FROM p_job_id;
    GET DIAGNOSTICS v_jobs = ROW_COUNT;

    -- 2. Queued TIs of schedulers that are gone.
    WITH orphaned AS (
        SELECT ti.id FROM task_instance ti
        WHERE ti.state = 'queued' AND ti.queued_by_job_id IS DISTINCT FROM p_job_id
          AND ti.queued_by_job_id IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM job j WHERE j.id = ti.queued_by_job_id AND j.state = 'running')
        FOR UPDATE OF ti SKIP LOCKED
    )
    UPDATE task_instance ti SET queued_by_job_id = p_job_id, updated_at = v_now
    FROM orphaned o WHERE ti.id = o.id AND ti.state = 'queued';
    GET DIAGNOSTICS v_adopt = ROW_COUNT;

    -- 3. Running TIs nobody will report, each in its own subtransaction.
    FOR v IN
        SELECT ti.id, ti.try_number, ti.dag_id, ti.task_id, ti.run_id,
               CASE WHEN j.id IS NULL THEN 'task heartbeat stale'
                    WHEN j.state = 'failed' THEN format('worker job %s died', j.id)
                    ELSE format('worker job %s ended (%s) without reporting the try', j.id, j.state) END AS reason
        FROM task_instance ti
        LEFT JOIN job j ON j.id = ti.worker_job_id
        WHERE ti.state = 'running'
          AND CASE WHEN j.id IS NULL THEN coalesce(ti.last_heartbeat_at, ti.start_date) < v_cutoff
                   ELSE j.state <> 'running' END
        ORDER BY ti.id
        FOR UPDATE OF ti SKIP LOCKED
    LOOP
        BEGIN
            IF finish_ti_v2(v.id, v.try_number, NULL, false, v.reason, v_now) IS NOT NULL THEN
                v_failed := v_failed + 1;
                UPDATE dag SET error_step = NULL, error = NULL, error_at = NULL
                WHERE dag.dag_id = v.dag_id AND dag.error_step = 'reset_orphans' AND NOT dag.dag_id = ANY (v_bad);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            v_msg := left(regexp_replace(format('could not end orphaned try %s of TI %s (task %s, run %s): %s [SQLSTATE %s]',
                                                v.try_number, v.id, v.task_id, v.run_id, SQLERRM, SQLSTATE),
                                         '\s+', ' ', 'g'), 4000);
            v_bad := v_bad || v.dag_id;
            UPDATE dag SET error_step = 'reset_orphans', error = v_msg, error_at = v_now WHERE dag.dag_id = v.dag_id;
            UPDATE task_instance SET state_reason = left('reset_orphans: ' || v_msg, 4000) WHERE id = v.id;
        END;
    END LOOP;

    -- 4. Tries being stopped whose worker is gone (see above); TI rows FOR UPDATE SKIP LOCKED.
    WITH gone AS (
        SELECT ti.id, CASE WHEN j.id IS NULL THEN 'its task heartbeat is stale'
                           ELSE format('its worker job %s is gone (%s)', j.id, j.state) END AS why
        FROM task_instance ti
        LEFT JOIN job j ON j.id = ti.worker_job_id
        WHERE ti.state = 'restarting'
          AND CASE WHEN j.id IS NULL THEN coalesce(ti.last_heartbeat_at, ti.start_date) < v_cutoff
                   ELSE j.state <> 'running' END
        FOR UPDATE OF ti SKIP LOCKED
    ), restarted AS (
        UPDATE task_instance ti
        SET state = 'none', worker_job_id = NULL, hostname = NULL, updated_at = v_now
        FROM gone g WHERE ti.id = g.id
        RETURNING ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, g.why
    )
    INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                              to_state, reason)
    SELECT v_now, 'restarted', x.dag_id, x.run_id, x.task_id, x.map_index, x.id, x.try_number, 'restarting', 'none',
           'the cleared try has stopped: ' || x.why
    FROM restarted x;

    WITH gone AS (
        SELECT ti.*, CASE WHEN j.id IS NULL THEN 'its task heartbeat is stale'
                          ELSE format('its worker job %s is gone (%s)', j.id, j.state) END AS why
        FROM task_instance ti
        LEFT JOIN job j ON j.id = ti.worker_job_id
        WHERE ti.state = 'preempting'
          AND CASE WHEN j.id IS NULL THEN coalesce(ti.last_heartbeat_at, ti.start_date) < v_cutoff
                   ELSE j.state <> 'running' END
        FOR UPDATE OF ti SKIP LOCKED
    ), history AS (
        INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                           pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                           worker_job_id, log_path, reason)
        SELECT p.id, p.dag_id, p.run_id, p.task_id, p.map_index, p.try_number, 'preempted', p.pool, p.pool_slots,
               p.queued_at, p.start_date, v_now, NULL, p.hostname, p.worker_job_id, p.log_path, p.state_reason
        FROM gone p
    ), back AS (
        UPDATE task_instance ti
        SET state = 'scheduled', max_tries = ti.max_tries + 1, end_date = v_now, exit_code = NULL,
            queued_at = NULL, queued_by_job_id = NULL, retry_at = NULL, worker_job_id = NULL, hostname = NULL,
            updated_at = v_now
        FROM gone p WHERE ti.id = p.id
        RETURNING ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, p.why
    )
    INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                              to_state, reason)
    SELECT v_now, 'preempted', x.dag_id, x.run_id, x.task_id, x.map_index, x.id, x.try_number, 'preempting',
           'scheduled', 'the preempted try has stopped: ' || x.why
    FROM back x;

    RETURN QUERY SELECT true, v_jobs, v_adopt, v_failed;
END;
$$;
