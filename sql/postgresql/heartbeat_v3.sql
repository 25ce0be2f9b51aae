-- heartbeat_v3(job_id, running, now): heartbeat_v2 plus preemption (docs/priority.md): a
-- `preempting` TI (preempt_v1 chose it as a victim) is, like a cleared one, not `running`, so
-- the worker that lists it is told to stop it (state 'preempting' and the reason); once this
-- job no longer lists it (its process tree is gone), it goes back to `scheduled` with max_tries
-- raised by one (the preemption uses no retry), a task_instance_history row (state
-- 'preempted') and a state_change row. Its slot is counted as used until then (queue_tis_v4,
-- limit_usage), and preempt_v1's reservation keeps it for the TI it was preempted for.
-- What heartbeat_v2 does: a live worker says so and learns which of its tries to
-- stop. `running` is a JSON array of the [ti_id, try_number] pairs the worker runs now.
-- Returns a first row (NULL, NULL, 'alive' or 'dead', NULL): 'dead' when the job is no longer
-- `running` (another process judged it dead; the caller must stop, as with heartbeat_v1).
-- Then, when alive, one row (ti_id, try_number, state, reason) per pair of `running` whose TI
-- is no longer running that try for this job: an operator cleared, marked, killed or cancelled
-- it (or its run). The worker stops each such try (SIGTERM, SIGKILL after the grace); its
-- later report is stale and changes nothing (finish_ti is a compare-and-set).
-- A TI in `restarting` (cleared while running) that this job owns and no longer runs (not in
-- `running`: its try has ended) goes back to `none` for a new try, with a state_change row.
-- As heartbeat_v1: stamps job.latest_heartbeat and the running TIs' last_heartbeat_at.
-- Lock: the job row (FOR UPDATE), then the TI rows it owns (row locks, held briefly).
-- Invariant: a restarting TI goes back to `none`, a preempting TI to `scheduled`, only once its
-- try's process is gone (the worker no longer lists it).
-- Callers may assume: a malformed `running` raises; nothing else does for stored values.
CREATE OR REPLACE FUNCTION heartbeat_v3(p_job_id bigint, p_running jsonb, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (ti_id bigint, try_number int, state text, reason text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
BEGIN
    PERFORM 1 FROM job j WHERE j.id = p_job_id AND j.state = 'running' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::bigint, NULL::int, 'dead'::text, NULL::text;
        RETURN;
    END IF;
    UPDATE job j SET latest_heartbeat = v_now WHERE j.id = p_job_id;
    UPDATE task_instance ti SET last_heartbeat_at = v_now
    WHERE ti.worker_job_id = p_job_id AND ti.state = 'running';

    WITH mine AS (
        SELECT (e ->> 0)::bigint AS ti_id, (e ->> 1)::int AS try_number
        FROM jsonb_array_elements(coalesce(p_running, '[]'::jsonb)) e
    ), restarted AS (
        UPDATE task_instance ti
        SET state = 'none', worker_job_id = NULL, hostname = NULL, updated_at = v_now
        WHERE ti.worker_job_id = p_job_id AND ti.state = 'restarting'
          AND NOT EXISTS (SELECT 1 FROM mine m WHERE m.ti_id = ti.id AND m.try_number = ti.try_number)
        RETURNING ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number
    )
    INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                              to_state, reason)
    SELECT v_now, 'restarted', x.dag_id, x.run_id, x.task_id, x.map_index, x.id, x.try_number, 'restarting', 'none',
           'the cleared try has stopped'
    FROM restarted x;

    WITH mine AS (
        SELECT (e ->> 0)::bigint AS ti_id, (e ->> 1)::int AS try_number
        FROM jsonb_array_elements(coalesce(p_running, '[]'::jsonb)) e
    ), stopped AS (
        SELECT ti.* FROM task_instance ti
        WHERE ti.worker_job_id = p_job_id AND ti.state = 'preempting'
          AND NOT EXISTS (SELECT 1 FROM mine m WHERE m.ti_id = ti.id AND m.try_number = ti.try_number)
        FOR UPDATE
    ), history AS (
        INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                           pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                           worker_job_id, log_path, reason)
        SELECT v.id, v.dag_id, v.run_id, v.task_id, v.map_index, v.try_number, 'preempted', v.pool, v.pool_slots,
               v.queued_at, v.start_date, v_now, NULL, v.hostname, v.worker_job_id, v.log_path, v.state_reason
        FROM stopped v
    ), back AS (
        UPDATE task_instance ti
        SET state = 'scheduled', max_tries = ti.max_tries + 1, end_date = v_now, exit_code = NULL,
            queued_at = NULL, queued_by_job_id = NULL, retry_at = NULL, worker_job_id = NULL, hostname = NULL,
            updated_at = v_now
        FROM stopped v WHERE ti.id = v.id
        RETURNING ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number
    )
    INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                              to_state, reason)
    SELECT v_now, 'preempted', x.dag_id, x.run_id, x.task_id, x.map_index, x.id, x.try_number, 'preempting',
           'scheduled', 'the preempted try has stopped'
    FROM back x;

    RETURN QUERY SELECT NULL::bigint, NULL::int, 'alive'::text, NULL::text;
    RETURN QUERY
    SELECT m.ti_id, m.try_number, coalesce(ti.state, 'gone')::text, ti.state_reason::text
    FROM (SELECT (e ->> 0)::bigint AS ti_id, (e ->> 1)::int AS try_number
          FROM jsonb_array_elements(coalesce(p_running, '[]'::jsonb)) e) m
    LEFT JOIN task_instance ti ON ti.id = m.ti_id
    WHERE ti.id IS NULL OR NOT (ti.state = 'running' AND ti.try_number = m.try_number
                                AND ti.worker_job_id = p_job_id);
END;
$$;
