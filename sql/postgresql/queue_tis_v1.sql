-- queue_tis_v1(max_tis, job_id, now, batch_factor): the critical section. Queue the TIs that
-- the greedy rule of DESIGN section 5 picks, mark them `queued` and return them.
--
-- The rule: walk the candidates (scheduled TIs of running runs of unpaused DAGs) in the order
-- priority_weight DESC, run_after, map_index, id; queue a TI iff queuing it keeps every limit
-- (pool slots summed by pool_slots with include_deferred and -1 = unlimited, the run's
-- max_active_tasks, the task's max_active_tis_per_dag and max_active_tis_per_dagrun, the
-- executor's parallelism); stop after max_tis. A TI stays scheduled only if a limit is full
-- for it, so nothing starves behind blocked work.
--
-- How: candidates are taken in order, a prefix batch at a time, skipping those whose
-- pool/run/task/executor is already full. In each batch, window passes decide candidates:
--   accept  if the running demand of everything not rejected up to and including it fits
--           every limit (greedy can only have taken less, so greedy takes it too);
--   reject  if the demand of what is already accepted ahead of it plus its own does not fit
--           (greedy has at least that much taken, so greedy refuses it).
-- Each pass decides at least the first undecided candidate (everything ahead of it is
-- decided, so both bounds coincide), so the passes end, at exactly the greedy set.
--
-- Lock: the row scheduler_lock('queue_tis'), FOR UPDATE NOWAIT, held to commit. Only this
-- function turns a scheduled TI into a queued one (the only move that adds to a limit's
-- usage), so holding it makes the counts below exact. A caller that cannot take it gets
-- SQLSTATE 55P03 (lock_not_available) at once: the scheduler reports "busy" and goes on.
-- Invariant: no limit is exceeded; a TI is queued once (compare-and-set on 'scheduled').
-- Callers may assume: the returned TIs are queued and stamped (queued_by_job_id, queued_at).
CREATE OR REPLACE FUNCTION queue_tis_v1(p_max_tis int, p_job_id bigint DEFAULT NULL,
                                        p_now timestamptz DEFAULT NULL, p_batch_factor int DEFAULT 4)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int,
               try_number int, pool text, queue text, executor text, priority_weight int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := coalesce(p_now, now());
    v_left   int := p_max_tis;              -- how many more this call may queue
    v_batch  int := greatest(64, least(p_max_tis * p_batch_factor, 10000));
    v_got    int;
    v_n      int;
    v_accepted bigint[] := '{}';
    -- keyset cursor over the candidate order
    k_pw int := NULL; k_after timestamptz; k_map int; k_id bigint;
BEGIN
    PERFORM 1 FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE NOWAIT;

    IF to_regclass('pg_temp.qt_cap') IS NULL THEN
        -- Session-local scratch tables, emptied at commit; created once per connection.
        CREATE TEMP TABLE qt_cap (kind char(1), key text, free int, PRIMARY KEY (kind, key)) ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE qt_cand (rank int PRIMARY KEY, id bigint, pool text, pool_slots int,
                                   dag_run_id bigint, dag_id text, task_id text, executor text,
                                   free_p int, free_r int, free_t int, free_m int, free_e int,
                                   status char(1)) ON COMMIT DELETE ROWS;
    END IF;

    -- Free capacity of every limited partition (no row: unlimited). Counts read active TIs
    -- only, which the limits themselves keep few.
    INSERT INTO qt_cap
    SELECT 'p', p.name, p.slots - coalesce(sum(ti.pool_slots), 0)
    FROM pool p
    LEFT JOIN task_instance ti ON ti.pool = p.name
         AND (ti.state IN ('queued', 'running') OR (ti.state = 'deferred' AND p.include_deferred))
    WHERE p.slots >= 0
    GROUP BY p.name, p.slots;

    INSERT INTO qt_cap  -- max_active_tasks per run (queued + running TIs of the run)
    SELECT 'r', r.id::text, d.max_active_tasks - count(ti.id)
    FROM dag_run r
    JOIN dag d ON d.dag_id = r.dag_id AND d.max_active_tasks IS NOT NULL
    LEFT JOIN task_instance ti ON ti.dag_run_id = r.id AND ti.state IN ('queued', 'running')
    WHERE r.state = 'running'
    GROUP BY r.id, d.max_active_tasks;

    INSERT INTO qt_cap  -- max_active_tis_per_dag per task, across runs
    SELECT 't', t.dag_id || '.' || t.task_id, t.max_active_tis_per_dag - count(ti.id)
    FROM task t
    LEFT JOIN task_instance ti ON ti.dag_id = t.dag_id AND ti.task_id = t.task_id
         AND ti.state IN ('queued', 'running')
    WHERE t.max_active_tis_per_dag IS NOT NULL
    GROUP BY t.dag_id, t.task_id, t.max_active_tis_per_dag;

    INSERT INTO qt_cap  -- max_active_tis_per_dagrun per (run, task)
    SELECT 'm', r.id || '.' || t.task_id, t.max_active_tis_per_dagrun - count(ti.id)
    FROM task t
    JOIN dag_run r ON r.dag_id = t.dag_id AND r.state = 'running'
    LEFT JOIN task_instance ti ON ti.dag_run_id = r.id AND ti.task_id = t.task_id
         AND ti.state IN ('queued', 'running')
    WHERE t.max_active_tis_per_dagrun IS NOT NULL
    GROUP BY r.id, t.task_id, t.max_active_tis_per_dagrun;

    INSERT INTO qt_cap  -- executor parallelism
    SELECT 'e', e.name, e.parallelism - count(ti.id)
    FROM executor e
    LEFT JOIN task_instance ti ON ti.executor = e.name AND ti.state IN ('queued', 'running')
    WHERE e.parallelism IS NOT NULL
    GROUP BY e.name, e.parallelism;

    WHILE v_left > 0 LOOP
        -- The next prefix of candidates, skipping those whose partitions are already full.
        INSERT INTO qt_cand
        SELECT row_number() OVER (ORDER BY c.priority_weight DESC, c.run_after, c.map_index, c.id),
               c.id, c.pool, c.pool_slots, c.dag_run_id, c.dag_id, c.task_id, c.executor,
               c.free_p, c.free_r, c.free_t, c.free_m, c.free_e, 'u'
        FROM (
            SELECT ti.id, ti.priority_weight, ti.run_after, ti.map_index, ti.pool, ti.pool_slots,
                   ti.dag_run_id, ti.dag_id, ti.task_id, ti.executor,
                   kp.free AS free_p, kr.free AS free_r, kt.free AS free_t, km.free AS free_m, ke.free AS free_e
            FROM task_instance ti
            JOIN dag_run r ON r.id = ti.dag_run_id AND r.state = 'running'
            JOIN dag d ON d.dag_id = ti.dag_id AND NOT d.is_paused
            LEFT JOIN qt_cap kp ON kp.kind = 'p' AND kp.key = ti.pool
            LEFT JOIN qt_cap kr ON kr.kind = 'r' AND kr.key = ti.dag_run_id::text
            LEFT JOIN qt_cap kt ON kt.kind = 't' AND kt.key = ti.dag_id || '.' || ti.task_id
            LEFT JOIN qt_cap km ON km.kind = 'm' AND km.key = ti.dag_run_id || '.' || ti.task_id
            LEFT JOIN qt_cap ke ON ke.kind = 'e' AND ke.key = ti.executor
            WHERE ti.state = 'scheduled'
              AND (k_pw IS NULL
                   OR ti.priority_weight < k_pw
                   OR (ti.priority_weight = k_pw AND (ti.run_after, ti.map_index, ti.id) > (k_after, k_map, k_id)))
              AND (kp.free IS NULL OR kp.free >= ti.pool_slots)
              AND (kr.free IS NULL OR kr.free >= 1)
              AND (kt.free IS NULL OR kt.free >= 1)
              AND (km.free IS NULL OR km.free >= 1)
              AND (ke.free IS NULL OR ke.free >= 1)
            ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id
            LIMIT v_batch
        ) c;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        EXIT WHEN v_got = 0;

        SELECT ti.priority_weight, ti.run_after, ti.map_index, ti.id INTO k_pw, k_after, k_map, k_id
        FROM qt_cand c JOIN task_instance ti ON ti.id = c.id ORDER BY c.rank DESC LIMIT 1;

        -- Window passes until every candidate of the batch is accepted ('a') or rejected ('r').
        LOOP
            WITH w AS (
                SELECT c.id, c.status, c.pool_slots, c.free_p, c.free_r, c.free_t, c.free_m, c.free_e,
                       sum(c.pool_slots) OVER wp AS p_all, coalesce(sum(c.pool_slots) FILTER (WHERE c.status = 'a') OVER wp, 0) AS p_acc,
                       count(*) OVER wr AS r_all, count(*) FILTER (WHERE c.status = 'a') OVER wr AS r_acc,
                       count(*) OVER wt AS t_all, count(*) FILTER (WHERE c.status = 'a') OVER wt AS t_acc,
                       count(*) OVER wm AS m_all, count(*) FILTER (WHERE c.status = 'a') OVER wm AS m_acc,
                       count(*) OVER we AS e_all, count(*) FILTER (WHERE c.status = 'a') OVER we AS e_acc,
                       count(*) OVER wg AS g_all, count(*) FILTER (WHERE c.status = 'a') OVER wg AS g_acc
                FROM qt_cand c
                WHERE c.status <> 'r'   -- a rejected candidate uses nothing
                WINDOW wp AS (PARTITION BY c.pool ORDER BY c.rank),
                       wr AS (PARTITION BY c.dag_run_id ORDER BY c.rank),
                       wt AS (PARTITION BY c.dag_id, c.task_id ORDER BY c.rank),
                       wm AS (PARTITION BY c.dag_run_id, c.task_id ORDER BY c.rank),
                       we AS (PARTITION BY c.executor ORDER BY c.rank),
                       wg AS (ORDER BY c.rank)
            ), decided AS (
                SELECT w.id,
                       CASE
                           WHEN (w.free_p IS NULL OR w.p_all <= w.free_p)
                            AND (w.free_r IS NULL OR w.r_all <= w.free_r)
                            AND (w.free_t IS NULL OR w.t_all <= w.free_t)
                            AND (w.free_m IS NULL OR w.m_all <= w.free_m)
                            AND (w.free_e IS NULL OR w.e_all <= w.free_e)
                            AND w.g_all <= v_left THEN 'a'
                           WHEN w.p_acc + w.pool_slots > w.free_p
                             OR w.r_acc + 1 > w.free_r OR w.t_acc + 1 > w.free_t
                             OR w.m_acc + 1 > w.free_m OR w.e_acc + 1 > w.free_e
                             OR w.g_acc + 1 > v_left THEN 'r'
                       END AS status
                FROM w WHERE w.status = 'u'
            )
            UPDATE qt_cand c SET status = d.status FROM decided d
            WHERE c.id = d.id AND d.status IS NOT NULL;
            EXIT WHEN NOT EXISTS (SELECT 1 FROM qt_cand c WHERE c.status = 'u');
        END LOOP;

        -- What this batch took now counts against every partition for the next batch.
        UPDATE qt_cap k SET free = k.free - u.used
        FROM (
            SELECT 'p' AS kind, c.pool AS key, sum(c.pool_slots)::int AS used FROM qt_cand c WHERE c.status = 'a' GROUP BY c.pool
            UNION ALL SELECT 'r', c.dag_run_id::text, count(*) FROM qt_cand c WHERE c.status = 'a' GROUP BY c.dag_run_id
            UNION ALL SELECT 't', c.dag_id || '.' || c.task_id, count(*) FROM qt_cand c WHERE c.status = 'a' GROUP BY c.dag_id, c.task_id
            UNION ALL SELECT 'm', c.dag_run_id || '.' || c.task_id, count(*) FROM qt_cand c WHERE c.status = 'a' GROUP BY c.dag_run_id, c.task_id
            UNION ALL SELECT 'e', c.executor, count(*) FROM qt_cand c WHERE c.status = 'a' GROUP BY c.executor
        ) u
        WHERE k.kind = u.kind AND k.key = u.key;

        SELECT v_accepted || coalesce(array_agg(c.id ORDER BY c.rank), '{}'), count(*)
        INTO v_accepted, v_n
        FROM qt_cand c WHERE c.status = 'a';
        v_left := v_left - v_n;
        DELETE FROM qt_cand;
        EXIT WHEN v_got < v_batch;  -- no candidates beyond this batch
    END LOOP;

    RETURN QUERY
    UPDATE task_instance ti
    SET state = 'queued', queued_at = v_now, queued_by_job_id = p_job_id, updated_at = v_now
    WHERE ti.id = ANY (v_accepted) AND ti.state = 'scheduled'
    RETURNING ti.id, ti.dag_id::text, ti.run_id::text, ti.task_id::text, ti.map_index, ti.try_number,
              ti.pool::text, ti.queue::text, ti.executor::text, ti.priority_weight;
END;
$$;
