-- queue_tis_v3(max_tis, job_id, now, page_factor): the critical section. Queue exactly the TIs
-- the greedy rule below picks, mark them `queued` and return them. Same parameters, result
-- columns, rule and lock as queue_tis_v2 (whose behaviour it keeps: partitions keyed by their
-- own columns, TIs nobody can run are not candidates); what changes is what a call costs
-- (docs/critical-section.md, "v3"):
--   * no read of the view limit_usage (every running run, every (run, task) pair with a limit,
--     at every call). What is used is counted from the ACTIVE TIs only (queued, running,
--     deferred: bounded by the capacity of the deployment, not by its backlog), grouped by
--     partition; caps are read from dag / task / pool / executor only for the partitions a batch
--     touches, by the joins that already check the candidates;
--   * the decision over a batch is one walk in queue order over arrays indexed by small integer
--     partition numbers (a greedy walk, literally), which stops at the max_tis-th accepted TI,
--     instead of rounds of window passes;
--   * the page of a pool skips, inside its index scan, the TIs greedy refuses anyway (wider than
--     the pool's free slots, or in a run, task, (run, task) or executor that is full: a probe of
--     the small used tables), so blocked candidates no longer fill pages and cost batches: they
--     cost one index entry and a few probes each.
-- Its statements are index probes and hash joins over the scratch tables; none hinges on a row
-- estimate of task_instance (a surge of new runs with stale statistics keeps the same plans).
--
-- THE RULE. Candidates are the scheduled TIs of running runs of active DAGs that are neither
-- paused nor draining (dag.is_draining, or deployment.is_draining for every DAG), plus the
-- resumes (scheduled TIs with a next_method: their trigger fired) of any running run of an
-- active DAG, paused or draining or not; in every case the TI's task is active and its pool and
-- executor exist. Walk them in the order priority_weight DESC, run_after, map_index, id and
-- queue a TI iff queuing it keeps every limit (counted as the view limit_usage counts: pool slots
-- summed by pool_slots with include_deferred, slots -1 = unlimited; the run's max_active_tasks;
-- the task's max_active_tis_per_dag and max_active_tis_per_dagrun; the executor's parallelism);
-- stop after max_tis. A candidate stays scheduled only if some limit is really full for it:
-- no starvation.
--
-- HOW, in batches that are prefixes of that order (greedy on a prefix does not depend on what
-- comes after it, so deciding prefix after prefix is exact):
--  0. Used: one read of the active TIs (index task_instance_queue_pool, state leading), summed
--     per pool, run, task, (run, task) and executor into scratch tables.
--  1. Page: from every pool that still has room, its next candidates in queue order through the
--     index task_instance_queue_pool, skipping TIs wider than its free slots and TIs of full
--     partitions (exact: usage only grows during a call, so greedy refuses them). Full pools are
--     never read. A pool's page is page_factor / 2 rows per free slot or per TI still to queue,
--     whichever is less, + 8 (blocked rows no longer take page rows, so the default factor 2
--     reads one row per slot; the factor doubles with every further batch of the call).
--  2. Cut: where a pool's page was full, candidates beyond its last row are unknown, so the batch
--     ends at the earliest such last row (in queue order). The next batch starts after it.
--  3. Prune what is not a candidate and what greedy refuses anyway (a partition already full);
--     number the rest in queue order, and each partition of the batch 1..n, with its free
--     capacity (cap - used, NULL = unlimited).
--  4. Walk the batch in queue order: take a TI iff its pool has pool_slots free and its run,
--     task, (run, task) and executor one more; subtract; stop at the max_tis-th taken TI. This is
--     the greedy rule itself over the prefix.
--  5. Charge what was taken to the used counts; next batch until max_tis are taken or no pool
--     has candidates left. Then one UPDATE (compare-and-set on 'scheduled') queues them.
--
-- LOCK: the row scheduler_lock('queue_tis'), FOR UPDATE NOWAIT, held until commit: the same row
-- as queue_tis_v1 and queue_tis_v2, so old and new schedulers serialize during a rolling
-- upgrade. Only the queue_tis functions turn a scheduled TI into a queued one (the only move
-- that adds to a limit's usage), so while one holds the lock the counts it read cannot grow.
-- (fire_trigger also queues, a deferred TI of an include_deferred pool, but that TI is already
-- counted by every limit.) A caller that cannot take the lock gets SQLSTATE 55P03
-- (lock_not_available) at once; the scheduler reports "busy" and goes on.
-- INVARIANT: no limit is exceeded; a TI is queued once (compare-and-set on 'scheduled').
-- CALLERS MAY ASSUME: the returned TIs are queued and stamped (queued_by_job_id, queued_at), in
-- queue order; nothing else changed. It may be called twice in one transaction.
CREATE OR REPLACE FUNCTION queue_tis_v3(p_max_tis int, p_job_id bigint DEFAULT NULL,
                                        p_now timestamptz DEFAULT NULL, p_page_factor int DEFAULT 2)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int,
               try_number int, pool text, queue text, executor text, priority_weight int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    v_left     int := p_max_tis;         -- how many more this call may queue
    v_page_max int := greatest(64, least(p_max_tis * 4, 10000));
    v_last     boolean := false;         -- the current batch reaches the end of every pool
    v_factor   int := p_page_factor;     -- page rows per free slot; doubles batch after batch
    v_accepted bigint[] := '{}';
    v_batch    bigint[];                 -- taken in this batch
    v_drain_all boolean;                 -- the whole deployment drains
    v_n        int;
    i          int;
    s          int;
    -- the batch, in queue order: id, pool_slots and partition numbers
    a_id bigint[]; a_slots int[]; a_pk int[]; a_rk int[]; a_tk int[]; a_mk int[]; a_ek int[];
    -- free capacity by partition number (NULL: unlimited)
    f_p int[]; f_r int[]; f_t int[]; f_m int[]; f_e int[];
    -- some partition of this kind is full
    f_run boolean; f_task boolean; f_task_run boolean; f_executor boolean;
    -- keyset cursor: the batch starts after this key of the queue order (NULL: the beginning)
    k_pw int; k_after timestamptz; k_map int; k_id bigint;
BEGIN
    -- The counts below must see what other transactions committed up to the moment the lock
    -- is taken; a REPEATABLE READ snapshot would be older than the lock.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'queue_tis_v3 needs READ COMMITTED isolation, not %', current_setting('transaction_isolation');
    END IF;
    PERFORM 1 FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE NOWAIT;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'scheduler_lock row queue_tis is missing; run `engine db upgrade`';
    END IF;

    IF to_regclass('pg_temp.qt3_used_pool') IS NULL THEN
        -- Session-local scratch tables, emptied at commit; created once per connection (not
        -- v1's or v2's: a session may call all three). What is used, per partition, by its key.
        CREATE TEMP TABLE qt3_used_pool (pool text PRIMARY KEY, n int) ON COMMIT DELETE ROWS;
        -- (cap: the partition's limit; n >= cap means full, and the page skips its TIs.)
        CREATE TEMP TABLE qt3_used_run (dag_run_id bigint PRIMARY KEY, n int, cap int) ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE qt3_used_task (dag_id text, task_id text, n int, cap int, PRIMARY KEY (dag_id, task_id))
            ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE qt3_used_task_run (dag_run_id bigint, task_id text, n int, cap int,
                                            PRIMARY KEY (dag_run_id, task_id)) ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE qt3_used_executor (executor text PRIMARY KEY, n int, cap int) ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE qt3_page (id bigint, pool text, priority_weight int, run_after timestamptz,
                                   map_index int, pool_slots int, dag_run_id bigint, dag_id text,
                                   task_id text, executor text, page int, n int, rn int) ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE qt3_cand (rank int, id bigint, pool text, pool_slots int,
                                   dag_run_id bigint, dag_id text, task_id text, executor text,
                                   pk int, rk int, tk int, mk int, ek int,
                                   free_p int, free_r int, free_t int, free_m int, free_e int) ON COMMIT DELETE ROWS;
    END IF;

    -- A second call in the same transaction finds the scratch tables still filled.
    DELETE FROM qt3_used_pool; DELETE FROM qt3_used_run; DELETE FROM qt3_used_task;
    DELETE FROM qt3_used_task_run; DELETE FROM qt3_used_executor;
    DELETE FROM qt3_page; DELETE FROM qt3_cand;

    SELECT coalesce(bool_or(dp.is_draining), false) INTO v_drain_all FROM deployment dp;

    -- 0. What the active TIs use, per LIMITED partition (as limit_usage counts: a deferred TI holds
    --    its place only in a pool with include_deferred, and then in every limit). A partition no
    --    active TI uses, or that has no limit, has no row.
    WITH a AS MATERIALIZED (
        SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.pool_slots, ti.executor
        FROM task_instance ti
        LEFT JOIN pool p ON p.name = ti.pool
        WHERE ti.state IN ('queued', 'running', 'deferred')
          AND (ti.state <> 'deferred' OR coalesce(p.include_deferred, false))
    ), u_pool AS (
        INSERT INTO qt3_used_pool
        SELECT a.pool, sum(a.pool_slots)::int FROM a GROUP BY a.pool
    ), u_run AS (
        INSERT INTO qt3_used_run
        SELECT a.dag_run_id, count(*), min(d.max_active_tasks)
        FROM a JOIN dag d ON d.dag_id = a.dag_id AND d.max_active_tasks IS NOT NULL
        GROUP BY a.dag_run_id
    ), u_task AS (
        INSERT INTO qt3_used_task
        SELECT a.dag_id, a.task_id, count(*), min(t.max_active_tis_per_dag)
        FROM a JOIN task t ON t.dag_id = a.dag_id AND t.task_id = a.task_id AND t.max_active_tis_per_dag IS NOT NULL
        GROUP BY a.dag_id, a.task_id
    ), u_task_run AS (
        INSERT INTO qt3_used_task_run
        SELECT a.dag_run_id, a.task_id, count(*), min(t.max_active_tis_per_dagrun)
        FROM a JOIN task t ON t.dag_id = a.dag_id AND t.task_id = a.task_id AND t.max_active_tis_per_dagrun IS NOT NULL
        GROUP BY a.dag_run_id, a.task_id
    )
    INSERT INTO qt3_used_executor
    SELECT a.executor, count(*), min(e.parallelism) FROM a JOIN executor e ON e.name = a.executor AND e.parallelism IS NOT NULL
    GROUP BY a.executor;

    WHILE v_left > 0 AND NOT v_last LOOP
        -- Which kinds of limit have a full partition now (the page probes only those).
        f_run := EXISTS (SELECT 1 FROM qt3_used_run u WHERE u.n >= u.cap);
        f_task := EXISTS (SELECT 1 FROM qt3_used_task u WHERE u.n >= u.cap);
        f_task_run := EXISTS (SELECT 1 FROM qt3_used_task_run u WHERE u.n >= u.cap);
        f_executor := EXISTS (SELECT 1 FROM qt3_used_executor u WHERE u.n >= u.cap);

        -- 1. A page per pool with room (an unknown pool has no row in `pool`: never read).
        INSERT INTO qt3_page
        SELECT x.*
        FROM (
            SELECT p.name,
                   CASE WHEN p.slots < 0 THEN least(v_page_max, (v_factor * v_left + 1) / 2 + 8)
                        ELSE least(v_page_max, (v_factor * least(p.slots - coalesce(u.n, 0), v_left) + 1) / 2 + 8)
                   END AS page,
                   CASE WHEN p.slots >= 0 THEN p.slots - coalesce(u.n, 0) END AS free
            FROM pool p
            LEFT JOIN qt3_used_pool u ON u.pool = p.name
            WHERE p.slots < 0 OR p.slots - coalesce(u.n, 0) >= 1
        ) op
        CROSS JOIN LATERAL (
            SELECT y.*, op.page, count(*) OVER () AS n, row_number() OVER () AS rn
            FROM (
                SELECT ti.id, ti.pool, ti.priority_weight, ti.run_after, ti.map_index, ti.pool_slots,
                       ti.dag_run_id, ti.dag_id, ti.task_id, ti.executor
                FROM task_instance ti
                WHERE ti.state = 'scheduled' AND ti.pool = op.name
                  AND (k_pw IS NULL
                       OR ti.priority_weight < k_pw
                       OR (ti.priority_weight = k_pw AND (ti.run_after, ti.map_index, ti.id) > (k_after, k_map, k_id)))
                  -- Skip what greedy refuses anyway, before it takes a row of the page: wider than
                  -- the pool's free slots, or in a run, task, (run, task) or executor already full.
                  AND (op.free IS NULL OR ti.pool_slots <= op.free)
                  -- (A kind with no full partition is not probed at all.)
                  AND (NOT f_run OR NOT EXISTS (SELECT 1 FROM qt3_used_run u
                                                WHERE u.dag_run_id = ti.dag_run_id AND u.n >= u.cap))
                  AND (NOT f_task OR NOT EXISTS (SELECT 1 FROM qt3_used_task u
                                                 WHERE u.dag_id = ti.dag_id AND u.task_id = ti.task_id AND u.n >= u.cap))
                  AND (NOT f_task_run OR NOT EXISTS (SELECT 1 FROM qt3_used_task_run u
                                                     WHERE u.dag_run_id = ti.dag_run_id AND u.task_id = ti.task_id
                                                       AND u.n >= u.cap))
                  AND (NOT f_executor OR NOT EXISTS (SELECT 1 FROM qt3_used_executor u
                                                     WHERE u.executor = ti.executor AND u.n >= u.cap))
                ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id
                LIMIT op.page
            ) y
        ) x;

        -- 2. Cut at the earliest last row of a full page.
        SELECT g.priority_weight, g.run_after, g.map_index, g.id INTO k_pw, k_after, k_map, k_id
        FROM qt3_page g WHERE g.n = g.page AND g.rn = g.n
        ORDER BY g.priority_weight DESC, g.run_after, g.map_index, g.id
        LIMIT 1;
        IF NOT FOUND THEN
            v_last := true;   -- every open pool was read to its end
        ELSE
            DELETE FROM qt3_page g
            WHERE g.priority_weight < k_pw
               OR (g.priority_weight = k_pw AND (g.run_after, g.map_index, g.id) > (k_after, k_map, k_id));
        END IF;

        -- 3. Prune; number the rest in queue order and each partition 1..n, with its free capacity
        --    (cap - used; NULL: no limit). Caps are read here, for this batch's partitions only.
        INSERT INTO qt3_cand
        SELECT row_number() OVER (ORDER BY z.priority_weight DESC, z.run_after, z.map_index, z.id),
               z.id, z.pool, z.pool_slots, z.dag_run_id, z.dag_id, z.task_id, z.executor,
               -- (Partition numbers only need equal keys to get equal numbers: byte order, COLLATE
               -- "C", sorts several times faster than a linguistic collation.)
               dense_rank() OVER (ORDER BY z.pool COLLATE "C"), dense_rank() OVER (ORDER BY z.dag_run_id),
               dense_rank() OVER (ORDER BY z.dag_id COLLATE "C", z.task_id COLLATE "C"),
               dense_rank() OVER (ORDER BY z.dag_run_id, z.task_id COLLATE "C"),
               dense_rank() OVER (ORDER BY z.executor COLLATE "C"),
               z.free_p, z.free_r, z.free_t, z.free_m, z.free_e
        FROM (
            SELECT g.*,
                   CASE WHEN p.slots >= 0 THEN p.slots - coalesce(up.n, 0) END AS free_p,
                   d.max_active_tasks - coalesce(ur.n, 0) AS free_r,
                   t.max_active_tis_per_dag - coalesce(ut.n, 0) AS free_t,
                   t.max_active_tis_per_dagrun - coalesce(um.n, 0) AS free_m,
                   ex.parallelism - coalesce(ue.n, 0) AS free_e,
                   (NOT d.is_paused AND NOT d.is_draining AND NOT v_drain_all) AS runs_now
            FROM qt3_page g
            JOIN dag_run r ON r.id = g.dag_run_id AND r.state = 'running'
            JOIN dag d ON d.dag_id = g.dag_id AND d.is_active
            JOIN task t ON t.dag_id = g.dag_id AND t.task_id = g.task_id AND t.is_active
            JOIN executor ex ON ex.name = g.executor
            JOIN pool p ON p.name = g.pool
            LEFT JOIN qt3_used_pool up ON up.pool = g.pool
            LEFT JOIN qt3_used_run ur ON ur.dag_run_id = g.dag_run_id
            LEFT JOIN qt3_used_task ut ON ut.dag_id = g.dag_id AND ut.task_id = g.task_id
            LEFT JOIN qt3_used_task_run um ON um.dag_run_id = g.dag_run_id AND um.task_id = g.task_id
            LEFT JOIN qt3_used_executor ue ON ue.executor = g.executor
        ) z
        WHERE (z.free_p IS NULL OR z.free_p >= z.pool_slots)
          AND (z.free_r IS NULL OR z.free_r >= 1)
          AND (z.free_t IS NULL OR z.free_t >= 1)
          AND (z.free_m IS NULL OR z.free_m >= 1)
          AND (z.free_e IS NULL OR z.free_e >= 1)
          AND (z.runs_now OR EXISTS (SELECT 1 FROM task_instance x WHERE x.id = z.id AND x.next_method IS NOT NULL));
        GET DIAGNOSTICS v_n = ROW_COUNT;
        DELETE FROM qt3_page;

        -- 4. The greedy walk over the batch, in queue order.
        v_batch := '{}';
        IF v_n > 0 THEN
            SELECT array_agg(c.id), array_agg(c.pool_slots), array_agg(c.pk), array_agg(c.rk), array_agg(c.tk),
                   array_agg(c.mk), array_agg(c.ek)
            INTO a_id, a_slots, a_pk, a_rk, a_tk, a_mk, a_ek
            FROM (SELECT * FROM qt3_cand ORDER BY rank) c;   -- one sort; the aggregates keep its order
            -- Partition k's free capacity at position k (the numbers are dense from 1).
            SELECT array_agg(x.f ORDER BY x.k) INTO f_p FROM (SELECT DISTINCT c.pk AS k, c.free_p AS f FROM qt3_cand c) x;
            SELECT array_agg(x.f ORDER BY x.k) INTO f_r FROM (SELECT DISTINCT c.rk AS k, c.free_r AS f FROM qt3_cand c) x;
            SELECT array_agg(x.f ORDER BY x.k) INTO f_t FROM (SELECT DISTINCT c.tk AS k, c.free_t AS f FROM qt3_cand c) x;
            SELECT array_agg(x.f ORDER BY x.k) INTO f_m FROM (SELECT DISTINCT c.mk AS k, c.free_m AS f FROM qt3_cand c) x;
            SELECT array_agg(x.f ORDER BY x.k) INTO f_e FROM (SELECT DISTINCT c.ek AS k, c.free_e AS f FROM qt3_cand c) x;
            FOR i IN 1 .. v_n LOOP
                s := a_slots[i];
                IF (f_p[a_pk[i]] IS NULL OR f_p[a_pk[i]] >= s)
                   AND (f_r[a_rk[i]] IS NULL OR f_r[a_rk[i]] >= 1)
                   AND (f_t[a_tk[i]] IS NULL OR f_t[a_tk[i]] >= 1)
                   AND (f_m[a_mk[i]] IS NULL OR f_m[a_mk[i]] >= 1)
                   AND (f_e[a_ek[i]] IS NULL OR f_e[a_ek[i]] >= 1) THEN
                    f_p[a_pk[i]] := f_p[a_pk[i]] - s;   -- NULL stays NULL: unlimited
                    f_r[a_rk[i]] := f_r[a_rk[i]] - 1;
                    f_t[a_tk[i]] := f_t[a_tk[i]] - 1;
                    f_m[a_mk[i]] := f_m[a_mk[i]] - 1;
                    f_e[a_ek[i]] := f_e[a_ek[i]] - 1;
                    v_batch := array_append(v_batch, a_id[i]);
                    v_left := v_left - 1;
                    EXIT WHEN v_left = 0;
                END IF;
            END LOOP;
        END IF;
        v_accepted := v_accepted || v_batch;

        -- 5. Charge what this batch took (only when another batch follows).
        IF v_left > 0 AND NOT v_last AND cardinality(v_batch) > 0 THEN
            INSERT INTO qt3_used_pool AS u
            SELECT c.pool, sum(c.pool_slots)::int FROM qt3_cand c WHERE c.id = ANY (v_batch) GROUP BY c.pool
            ON CONFLICT ON CONSTRAINT qt3_used_pool_pkey DO UPDATE SET n = u.n + excluded.n;
            -- (A partition new to these tables had nothing used: its cap is its free capacity.)
            INSERT INTO qt3_used_run AS u
            SELECT c.dag_run_id, count(*), min(c.free_r) FROM qt3_cand c
            WHERE c.id = ANY (v_batch) AND c.free_r IS NOT NULL GROUP BY c.dag_run_id
            ON CONFLICT ON CONSTRAINT qt3_used_run_pkey DO UPDATE SET n = u.n + excluded.n;
            INSERT INTO qt3_used_task AS u
            SELECT c.dag_id, c.task_id, count(*), min(c.free_t) FROM qt3_cand c
            WHERE c.id = ANY (v_batch) AND c.free_t IS NOT NULL GROUP BY c.dag_id, c.task_id
            ON CONFLICT ON CONSTRAINT qt3_used_task_pkey DO UPDATE SET n = u.n + excluded.n;
            INSERT INTO qt3_used_task_run AS u
            SELECT c.dag_run_id, c.task_id, count(*), min(c.free_m) FROM qt3_cand c
            WHERE c.id = ANY (v_batch) AND c.free_m IS NOT NULL GROUP BY c.dag_run_id, c.task_id
            ON CONFLICT ON CONSTRAINT qt3_used_task_run_pkey DO UPDATE SET n = u.n + excluded.n;
            INSERT INTO qt3_used_executor AS u
            SELECT c.executor, count(*), min(c.free_e) FROM qt3_cand c
            WHERE c.id = ANY (v_batch) AND c.free_e IS NOT NULL GROUP BY c.executor
            ON CONFLICT ON CONSTRAINT qt3_used_executor_pkey DO UPDATE SET n = u.n + excluded.n;
        END IF;
        DELETE FROM qt3_cand;
        -- Another batch means pruning or refusals ate this one: read deeper next time.
        v_factor := least(v_factor * 2, 256);
    END LOOP;

    RETURN QUERY
    WITH queued AS (
        UPDATE task_instance ti
        SET state = 'queued', queued_at = v_now, queued_by_job_id = p_job_id, updated_at = v_now
        WHERE ti.id = ANY (v_accepted) AND ti.state = 'scheduled'
        RETURNING ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number,
                  ti.pool, ti.queue, ti.executor, ti.priority_weight, ti.run_after
    )
    SELECT q.id, q.dag_id, q.run_id, q.task_id, q.map_index, q.try_number, q.pool, q.queue, q.executor,
           q.priority_weight
    FROM queued q
    ORDER BY q.priority_weight DESC, q.run_after, q.map_index, q.id;
END;
$$;
