-- queue_tis_v1(max_tis, job_id, now, page_factor): the critical section. Queue exactly the TIs
-- the greedy rule of DESIGN section 5 picks, mark them `queued` and return them.
--
-- THE RULE. Candidates are the scheduled TIs of running runs of unpaused DAGs, in the order
-- priority_weight DESC, run_after, map_index, id. Walk them in that order and queue a TI iff
-- queuing it keeps every limit (view limit_usage: pool slots summed by pool_slots with
-- include_deferred, slots -1 = unlimited; the run's max_active_tasks; the task's
-- max_active_tis_per_dag and max_active_tis_per_dagrun; the executor's parallelism); stop after
-- max_tis. A TI stays scheduled only if some limit is really full for it: no starvation.
--
-- HOW, in batches that are prefixes of that order (greedy on a prefix does not depend on what
-- comes after it, so deciding prefix after prefix is exact):
--  1. Page: from every pool that still has room, read its next candidates in queue order
--     through the index task_instance_queue_pool (state, pool, priority_weight DESC, run_after,
--     map_index, id). Full pools are never read, however many TIs wait in them. A pool's page
--     is about twice its free slots (each TI needs at least one slot) and doubles with every
--     further batch of the same call, when pruned or rejected candidates ate the page.
--  2. Cut: where a pool's page was full, candidates beyond its last row are unknown, so the
--     batch ends at the earliest such last row (in queue order). The next batch starts after it.
--  3. Prune candidates whose run, task or executor is already full or whose run/DAG is not
--     eligible: greedy would refuse them anyway.
--  4. Decide the batch with window passes. With running sums per partition in queue order:
--       accept  if the demand of everything not rejected, up to and including it, fits every
--               limit (greedy can only have taken less ahead of it, so greedy takes it);
--       reject  if what is already accepted ahead of it plus its own demand does not fit
--               (greedy has at least that much, so greedy refuses it).
--     Each accept+reject round decides at least the first undecided candidate (everything
--     ahead of it is decided, so both bounds coincide). Rounds stop once the first max_tis
--     accepted are settled: greedy with a limit of n takes the first n of what greedy without
--     a limit takes, so max_tis is applied last, as a cut.
--  5. Charge the accepted demand to every partition and go on with the next batch until
--     max_tis are taken or no pool has candidates left.
--
-- LOCK: the row scheduler_lock('queue_tis'), FOR UPDATE NOWAIT, held until commit. Only this
-- function turns a scheduled TI into a queued one (the only move that adds to a limit's usage),
-- so while it holds the lock the counts it read cannot grow. A caller that cannot take the lock
-- gets SQLSTATE 55P03 (lock_not_available) at once; the scheduler reports "busy" and goes on.
-- INVARIANT: no limit is exceeded; a TI is queued once (compare-and-set on 'scheduled').
-- CALLERS MAY ASSUME: the returned TIs are queued and stamped (queued_by_job_id, queued_at), in
-- queue order; nothing else changed.
CREATE OR REPLACE FUNCTION queue_tis_v1(p_max_tis int, p_job_id bigint DEFAULT NULL,
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
    v_n        int;
    v_first_open int;                    -- rank of the first undecided candidate of the batch
    v_factor   int := p_page_factor;     -- page rows per free slot; doubles batch after batch
    v_accepted bigint[] := '{}';
    -- keyset cursor: the batch starts after this key of the queue order (NULL: the beginning)
    k_pw int; k_after timestamptz; k_map int; k_id bigint;
BEGIN
    -- The counts below must see what other transactions committed up to the moment the lock
    -- is taken; a REPEATABLE READ snapshot would be older than the lock.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'queue_tis_v1 needs READ COMMITTED isolation, not %', current_setting('transaction_isolation');
    END IF;
    PERFORM 1 FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE NOWAIT;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'scheduler_lock row queue_tis is missing; run `engine db upgrade`';
    END IF;

    IF to_regclass('pg_temp.qt_cap') IS NULL THEN
        -- Session-local scratch tables, emptied at commit; created once per connection.
        CREATE TEMP TABLE qt_cap (kind text, key text, free int, PRIMARY KEY (kind, key)) ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE qt_page (id bigint, pool text, priority_weight int, run_after timestamptz,
                                   map_index int, pool_slots int, dag_run_id bigint, dag_id text,
                                   task_id text, executor text, page int, n int, rn int) ON COMMIT DELETE ROWS;
        -- pk, tk, mk, ek number the pool, task, (run, task) and executor partitions of a batch:
        -- the window passes sort on small integers instead of names.
        CREATE TEMP TABLE qt_cand (rank int PRIMARY KEY, id bigint, pool text, pool_slots int,
                                   dag_run_id bigint, dag_id text, task_id text, executor text,
                                   pk int, tk int, mk int, ek int,
                                   free_p int, free_r int, free_t int, free_m int, free_e int,
                                   status char(1)) ON COMMIT DELETE ROWS;
    END IF;

    -- A second call in the same transaction finds the scratch tables still filled.
    DELETE FROM qt_cap; DELETE FROM qt_page; DELETE FROM qt_cand;

    -- Free capacity of every limited partition, read once (no row: unlimited).
    INSERT INTO qt_cap SELECT u.kind, u.key, u.free FROM limit_usage u;

    WHILE v_left > 0 AND NOT v_last LOOP
        -- 1. A page per pool with room.
        INSERT INTO qt_page
        SELECT x.*
        FROM (
            SELECT p.name,
                   CASE WHEN k.free IS NULL THEN v_page_max
                        ELSE least(v_page_max, v_factor * k.free + 8) END AS page,
                   k.free
            FROM pool p
            LEFT JOIN qt_cap k ON k.kind = 'pool' AND k.key = p.name
            WHERE p.slots < 0 OR k.free >= 1
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
                ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id
                LIMIT op.page
            ) y
        ) x;

        -- 2. Cut at the earliest last row of a full page.
        SELECT g.priority_weight, g.run_after, g.map_index, g.id INTO k_pw, k_after, k_map, k_id
        FROM qt_page g WHERE g.n = g.page AND g.rn = g.n
        ORDER BY g.priority_weight DESC, g.run_after, g.map_index, g.id
        LIMIT 1;
        IF NOT FOUND THEN
            v_last := true;   -- every open pool was read to its end
        ELSE
            DELETE FROM qt_page g
            WHERE g.priority_weight < k_pw
               OR (g.priority_weight = k_pw AND (g.run_after, g.map_index, g.id) > (k_after, k_map, k_id));
        END IF;

        -- 3. Prune what greedy would refuse anyway; rank the rest in queue order.
        INSERT INTO qt_cand
        SELECT row_number() OVER (ORDER BY g.priority_weight DESC, g.run_after, g.map_index, g.id),
               g.id, g.pool, g.pool_slots, g.dag_run_id, g.dag_id, g.task_id, g.executor,
               dense_rank() OVER (ORDER BY g.pool), dense_rank() OVER (ORDER BY g.dag_id, g.task_id),
               dense_rank() OVER (ORDER BY g.dag_run_id, g.task_id), dense_rank() OVER (ORDER BY g.executor),
               kp.free, kr.free, kt.free, km.free, ke.free, 'u'
        FROM qt_page g
        JOIN dag_run r ON r.id = g.dag_run_id AND r.state = 'running'
        JOIN dag d ON d.dag_id = g.dag_id AND NOT d.is_paused
        LEFT JOIN qt_cap kp ON kp.kind = 'pool' AND kp.key = g.pool
        LEFT JOIN qt_cap kr ON kr.kind = 'run' AND kr.key = g.dag_run_id::text
        LEFT JOIN qt_cap kt ON kt.kind = 'task' AND kt.key = g.dag_id || '.' || g.task_id
        LEFT JOIN qt_cap km ON km.kind = 'task_run' AND km.key = g.dag_run_id || '.' || g.task_id
        LEFT JOIN qt_cap ke ON ke.kind = 'executor' AND ke.key = g.executor
        WHERE (kp.free IS NULL OR kp.free >= g.pool_slots)
          AND (kr.free IS NULL OR kr.free >= 1)
          AND (kt.free IS NULL OR kt.free >= 1)
          AND (km.free IS NULL OR km.free >= 1)
          AND (ke.free IS NULL OR ke.free >= 1);
        DELETE FROM qt_page;

        -- 4. Passes until the first v_left accepted are known (max_tis aside, see below).
        LOOP
            -- Accept: the running demand of everything not rejected fits every limit.
            WITH w AS (
                SELECT c.id, c.status, c.pool_slots, c.free_p, c.free_r, c.free_t, c.free_m, c.free_e,
                       sum(c.pool_slots) OVER wp AS p_sum, count(*) OVER wr AS r_sum, count(*) OVER wt AS t_sum,
                       count(*) OVER wm AS m_sum, count(*) OVER we AS e_sum
                FROM qt_cand c
                WHERE c.status <> 'r'   -- a rejected candidate uses nothing
                WINDOW wp AS (PARTITION BY c.pk ORDER BY c.rank), wr AS (PARTITION BY c.dag_run_id ORDER BY c.rank),
                       wt AS (PARTITION BY c.tk ORDER BY c.rank), wm AS (PARTITION BY c.mk ORDER BY c.rank),
                       we AS (PARTITION BY c.ek ORDER BY c.rank)
            )
            UPDATE qt_cand c SET status = 'a' FROM w
            WHERE c.id = w.id AND w.status = 'u'
              AND (w.free_p IS NULL OR w.p_sum <= w.free_p) AND (w.free_r IS NULL OR w.r_sum <= w.free_r)
              AND (w.free_t IS NULL OR w.t_sum <= w.free_t) AND (w.free_m IS NULL OR w.m_sum <= w.free_m)
              AND (w.free_e IS NULL OR w.e_sum <= w.free_e);

            -- Reject: what is accepted ahead (including just now) plus its own demand does not fit.
            WITH w AS (
                SELECT c.id, c.status, c.pool_slots, c.free_p, c.free_r, c.free_t, c.free_m, c.free_e,
                       coalesce(sum(c.pool_slots) FILTER (WHERE c.status = 'a') OVER wp, 0) AS p_acc,
                       count(*) FILTER (WHERE c.status = 'a') OVER wr AS r_acc,
                       count(*) FILTER (WHERE c.status = 'a') OVER wt AS t_acc,
                       count(*) FILTER (WHERE c.status = 'a') OVER wm AS m_acc,
                       count(*) FILTER (WHERE c.status = 'a') OVER we AS e_acc
                FROM qt_cand c
                WHERE c.status <> 'r'
                WINDOW wp AS (PARTITION BY c.pk ORDER BY c.rank), wr AS (PARTITION BY c.dag_run_id ORDER BY c.rank),
                       wt AS (PARTITION BY c.tk ORDER BY c.rank), wm AS (PARTITION BY c.mk ORDER BY c.rank),
                       we AS (PARTITION BY c.ek ORDER BY c.rank)
            )
            UPDATE qt_cand c SET status = 'r' FROM w
            WHERE c.id = w.id AND w.status = 'u'
              AND (w.p_acc + w.pool_slots > w.free_p OR w.r_acc + 1 > w.free_r OR w.t_acc + 1 > w.free_t
                   OR w.m_acc + 1 > w.free_m OR w.e_acc + 1 > w.free_e);

            -- Done when everything ahead of the first undecided candidate is decided and holds
            -- v_left accepted: what comes after cannot be among the first v_left.
            SELECT min(c.rank) INTO v_first_open FROM qt_cand c WHERE c.status = 'u';
            EXIT WHEN v_first_open IS NULL
                   OR (SELECT count(*) FROM qt_cand c WHERE c.status = 'a' AND c.rank < v_first_open) >= v_left;
        END LOOP;

        -- max_tis: greedy with a limit of n takes the first n of what greedy without it takes,
        -- so the passes ignore it; only the first v_left accepted are kept.
        UPDATE qt_cand c SET status = 'x'
        FROM (SELECT c2.rank FROM qt_cand c2 WHERE c2.status = 'a' ORDER BY c2.rank OFFSET v_left) extra
        WHERE c.rank = extra.rank;

        -- 5. Charge what this batch took to every partition.
        UPDATE qt_cap k SET free = k.free - u.used
        FROM (
            SELECT 'pool' AS kind, c.pool AS key, sum(c.pool_slots)::int AS used
            FROM qt_cand c WHERE c.status = 'a' GROUP BY c.pool
            UNION ALL SELECT 'run', c.dag_run_id::text, count(*)
            FROM qt_cand c WHERE c.status = 'a' GROUP BY c.dag_run_id
            UNION ALL SELECT 'task', c.dag_id || '.' || c.task_id, count(*)
            FROM qt_cand c WHERE c.status = 'a' GROUP BY c.dag_id, c.task_id
            UNION ALL SELECT 'task_run', c.dag_run_id || '.' || c.task_id, count(*)
            FROM qt_cand c WHERE c.status = 'a' GROUP BY c.dag_run_id, c.task_id
            UNION ALL SELECT 'executor', c.executor, count(*)
            FROM qt_cand c WHERE c.status = 'a' GROUP BY c.executor
        ) u
        WHERE k.kind = u.kind AND k.key = u.key;

        SELECT v_accepted || coalesce(array_agg(c.id ORDER BY c.rank), '{}'), count(*)
        INTO v_accepted, v_n
        FROM qt_cand c WHERE c.status = 'a';
        v_left := v_left - v_n;
        DELETE FROM qt_cand;
        -- Another batch means pruning or rejections ate this one: read deeper next time.
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
