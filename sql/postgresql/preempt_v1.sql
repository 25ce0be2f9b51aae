-- preempt_v1(now, cooldown, max_per_pass, min_runtime): preemption (docs/priority.md). Called by
-- the scheduler in each pass after queue_tis. For each WAITING TI, in queue order: a scheduled
-- candidate (as queue_tis_v4 defines them) without a reservation, in a pool with a
-- preempt_margin (pool.preempt_margin NOT NULL) and limited slots, refused ONLY because that pool
-- is full: its run, task, (run, task) and executor limits have room, but the pool's free slots
-- (slots - what queued, running, preempting and held deferred TIs use - the slots other
-- reservations keep) are fewer than its pool_slots. Its VICTIMS are running TIs of the same pool
-- whose task is preemptible (task.preemptible), of priority_weight <= its priority_weight -
-- preempt_margin, running for at least min_runtime seconds and not preempted within the last
-- cooldown seconds (task_instance.preempted_at), taken lowest priority first, then least time run
-- (latest start_date), then id, until their slots cover what is missing; if they cannot, nobody
-- is preempted for it. The victims become `preempting` (state_reason says for whom,
-- preempted_at = now, a state_change row each), and the waiting TI gets a reservation of its
-- pool_slots (reason 'preemption'): queue_tis_v4 keeps the freed slots for it and nobody else.
-- At most max_per_pass victims per call. The worker running a victim is told by heartbeat_v3,
-- stops it (SIGTERM, SIGKILL after the grace) and heartbeat_v3 moves it back to `scheduled`
-- without using a retry. A preempting TI whose worker job is no longer running (died) goes
-- back to `scheduled` here (its processes died with the worker's supervisor).
-- Returns one row per victim: (ti_id, for_ti_id, reason).
--
-- LOCK: scheduler_lock('queue_tis'), FOR UPDATE NOWAIT, held until commit (the lock of
-- queue_tis_v4, which reads pool_reservation and the same counts): SQLSTATE 55P03 at once when
-- another scheduler holds it; the scheduler reports "busy" and goes on.
-- INVARIANT: a TI is never preempted for a TI that could be queued without it; a TI is
-- preempted at most once per cooldown; a pool's slots are never promised twice (the reserved
-- slots are counted before victims are chosen).
-- CALLERS MAY ASSUME: the rows returned are `preempting` now; nothing else changed but
-- pool_reservation and state_change.
CREATE OR REPLACE FUNCTION preempt_v1(p_now timestamptz DEFAULT NULL, p_cooldown double precision DEFAULT 300,
                                      p_max_per_pass int DEFAULT 10, p_min_runtime double precision DEFAULT 60)
RETURNS TABLE (ti_id bigint, for_ti_id bigint, reason text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now       timestamptz := coalesce(p_now, now());
    v_left      int := p_max_per_pass;
    v_drain_all boolean;
    w           record;
    v_victims   bigint[];
    v_reason    text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pool p WHERE p.preempt_margin IS NOT NULL)
       AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.state = 'preempting') THEN
        RETURN;   -- preemption is off everywhere: no lock taken, nothing read
    END IF;
    PERFORM 1 FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE NOWAIT;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'scheduler_lock row queue_tis is missing; run `engine db upgrade`';
    END IF;
    SELECT coalesce(bool_or(dp.is_draining), false) INTO v_drain_all FROM deployment dp;

    -- A victim whose worker died: its try is gone with it; back to scheduled, no retry used.
    WITH orphaned AS (
        UPDATE task_instance ti
        SET state = 'scheduled', max_tries = ti.max_tries + 1, end_date = v_now, queued_at = NULL,
            queued_by_job_id = NULL, worker_job_id = NULL, hostname = NULL, updated_at = v_now
        WHERE ti.state = 'preempting'
          AND NOT EXISTS (SELECT 1 FROM job j WHERE j.id = ti.worker_job_id AND j.state = 'running')
        RETURNING ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number
    )
    INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                              to_state, reason)
    SELECT v_now, 'preempted', o.dag_id, o.run_id, o.task_id, o.map_index, o.id, o.try_number, 'preempting',
           'scheduled', 'the worker of the preempted try is gone'
    FROM orphaned o;

    FOR w IN
        SELECT ti.id, ti.pool, ti.pool_slots, ti.priority_weight, p.slots, p.preempt_margin,
               p.slots - coalesce((SELECT sum(a.pool_slots) FROM task_instance a
                                   WHERE a.pool = ti.pool
                                     AND (a.state IN ('queued', 'running', 'preempting')
                                          OR (a.state = 'deferred' AND p.include_deferred))), 0)
                       - coalesce((SELECT sum(x.slots) FROM pool_reservation x WHERE x.pool = ti.pool), 0) AS free
        FROM pool p
        JOIN task_instance ti ON ti.state = 'scheduled' AND ti.pool = p.name AND ti.pool_slots <= p.slots
        JOIN dag_run dr ON dr.id = ti.dag_run_id AND dr.state = 'running'
        JOIN dag d ON d.dag_id = ti.dag_id AND d.is_active
        JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id AND t.is_active
        JOIN executor ex ON ex.name = ti.executor
        WHERE p.preempt_margin IS NOT NULL AND p.slots > 0
          AND ((NOT d.is_paused AND NOT d.is_draining AND NOT v_drain_all) OR ti.next_method IS NOT NULL)
          AND NOT EXISTS (SELECT 1 FROM pool_reservation x WHERE x.ti_id = ti.id)
          -- only where some victim could exist at all (keeps the loop to the few TIs that matter)
          AND EXISTS (SELECT 1 FROM task_instance v JOIN task vt ON vt.dag_id = v.dag_id AND vt.task_id = v.task_id
                      WHERE v.state = 'running' AND v.pool = p.name AND vt.preemptible
                        AND v.priority_weight <= ti.priority_weight - p.preempt_margin)
          -- refused only because of the pool: every other limit has room
          AND (d.max_active_tasks IS NULL OR d.max_active_tasks >
               (SELECT count(*) FROM task_instance a WHERE a.dag_run_id = ti.dag_run_id
                  AND a.state IN ('queued', 'running', 'preempting', 'deferred')))
          AND (t.max_active_tis_per_dag IS NULL OR t.max_active_tis_per_dag >
               (SELECT count(*) FROM task_instance a WHERE a.dag_id = ti.dag_id AND a.task_id = ti.task_id
                  AND a.state IN ('queued', 'running', 'preempting', 'deferred')))
          AND (t.max_active_tis_per_dagrun IS NULL OR t.max_active_tis_per_dagrun >
               (SELECT count(*) FROM task_instance a WHERE a.dag_run_id = ti.dag_run_id AND a.task_id = ti.task_id
                  AND a.state IN ('queued', 'running', 'preempting', 'deferred')))
          AND (ex.parallelism IS NULL OR ex.parallelism >
               (SELECT count(*) FROM task_instance a WHERE a.executor = ti.executor
                  AND a.state IN ('queued', 'running', 'preempting', 'deferred')))
        ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id
        LIMIT 100
    LOOP
        EXIT WHEN v_left <= 0;
        -- (free counts this pass's victims, reservations and earlier waiting TIs' reservations:
        -- re-read per waiting TI, as the loop's query was planned before them.)
        SELECT p.slots - coalesce((SELECT sum(a.pool_slots) FROM task_instance a
                                   WHERE a.pool = p.name
                                     AND (a.state IN ('queued', 'running', 'preempting')
                                          OR (a.state = 'deferred' AND p.include_deferred))), 0)
                       - coalesce((SELECT sum(x.slots) FROM pool_reservation x WHERE x.pool = p.name), 0)
        INTO w.free FROM pool p WHERE p.name = w.pool;
        CONTINUE WHEN w.free >= w.pool_slots;   -- it fits: queue_tis takes it, nobody is preempted
        SELECT array_agg(c.id ORDER BY c.k) INTO v_victims
        FROM (
            SELECT v.id, row_number() OVER o AS k, sum(v.pool_slots) OVER o AS covered,
                   sum(v.pool_slots) OVER o - v.pool_slots AS before
            FROM task_instance v
            JOIN task vt ON vt.dag_id = v.dag_id AND vt.task_id = v.task_id AND vt.preemptible
            WHERE v.state = 'running' AND v.pool = w.pool
              AND v.priority_weight <= w.priority_weight - w.preempt_margin
              AND v.start_date <= v_now - p_min_runtime * interval '1 second'
              AND (v.preempted_at IS NULL OR v.preempted_at <= v_now - p_cooldown * interval '1 second')
            WINDOW o AS (ORDER BY v.priority_weight, v.start_date DESC, v.id)
        ) c
        WHERE c.before < w.pool_slots - greatest(w.free, 0);   -- the prefix that covers what is missing
        IF v_victims IS NULL OR cardinality(v_victims) > v_left
           OR (SELECT sum(v.pool_slots) FROM task_instance v WHERE v.id = ANY (v_victims))
              < w.pool_slots - greatest(w.free, 0) THEN
            CONTINUE;   -- not enough to free (or over this pass's budget): nobody is preempted for it
        END IF;
        v_reason := format('preempted for TI %s (priority %s)', w.id, w.priority_weight);
        -- Row locks in id order (as a worker's heartbeat takes its TIs'), then the compare-and-set.
        PERFORM 1 FROM task_instance v WHERE v.id = ANY (v_victims) ORDER BY v.id FOR UPDATE;
        WITH marked AS (
            UPDATE task_instance v
            SET state = 'preempting', state_reason = v_reason, preempted_at = v_now, preempted_for = w.id,
                updated_at = v_now
            WHERE v.id = ANY (v_victims) AND v.state = 'running'
            RETURNING v.id, v.dag_id, v.run_id, v.task_id, v.map_index, v.try_number
        )
        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        SELECT v_now, 'preempt', m.dag_id, m.run_id, m.task_id, m.map_index, m.id, m.try_number, 'running',
               'preempting', v_reason
        FROM marked m;
        INSERT INTO pool_reservation (ti_id, pool, slots, reason, since)
        VALUES (w.id, w.pool, w.pool_slots, 'preemption', v_now);
        v_left := v_left - cardinality(v_victims);
        RETURN QUERY SELECT v.id, w.id, v_reason FROM task_instance v   -- those the compare-and-set moved
                     WHERE v.id = ANY (v_victims) AND v.state = 'preempting' AND v.preempted_for = w.id
                       AND v.preempted_at = v_now;
    END LOOP;
END;
$$;
