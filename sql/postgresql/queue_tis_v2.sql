-- queue_tis_v2(max_tis, job_id, now, page_factor): the critical section. Queue exactly the TIs
-- the greedy rule below picks, mark them `queued` and return them. Same parameters, result
-- columns and rule as queue_tis_v1, with two changes:
--   * every partition is keyed by its own columns (a pool, a run id, a (dag_id, task_id) pair,
--     a (run id, task_id) pair, an executor), never by names joined with '.': ids may contain
--     dots, and v1's joined keys made DAG 'x.y' task 'z' and DAG 'x' task 'y.z' one partition
--     (a duplicate key that stopped all queuing, or one task refused for the other's limit);
--   * a TI is a candidate only while its DAG and its task are active (a sync removed neither),
--     and its pool and its executor have a row; pending_reasons names the others.
--
-- THE RULE. Candidates are the scheduled TIs of running runs of active DAGs that are neither
-- paused nor draining (dag.is_draining, or deployment.is_draining for every DAG), plus the
-- resumes (scheduled TIs with a next_method: their trigger fired) of any running run of an
-- active DAG, paused or draining or not; in every case the TI's task is active and its pool and
-- executor exist. Walk them in the order priority_weight DESC, run_after, map_index, id and
-- queue a TI iff queuing it keeps every limit (view limit_usage: pool slots summed by
-- pool_slots with include_deferred, slots -1 = unlimited; the run's max_active_tasks; the
-- task's max_active_tis_per_dag and max_active_tis_per_dagrun; the executor's parallelism);
-- stop after max_tis. A candidate stays scheduled only if some limit is really full for it:
-- no starvation.
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
--  3. Prune what is not a candidate (run not running; DAG or task removed; executor unknown;
--     DAG paused or draining, unless the TI resumes) and what greedy would refuse anyway (its
--     run, task or executor partition is already full). An unknown pool is never paged.
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
-- LOCK: the row scheduler_lock('queue_tis'), FOR UPDATE NOWAIT, held until commit: the same row
-- as queue_tis_v1, so an old and a new scheduler serialize during a rolling upgrade. Only the
-- queue_tis functions turn a scheduled TI into a queued one (the only move that adds to a
-- limit's usage), so while one holds the lock the counts it read cannot grow. (fire_trigger_v1
-- also queues, a deferred TI of an include_deferred pool, but that TI is already counted by
-- every limit.) A caller that cannot take the lock gets SQLSTATE 55P03 (lock_not_available) at
-- once; the scheduler reports "busy" and goes on.
-- INVARIANT: no limit is exceeded; a TI is queued once (compare-and-set on 'scheduled').
-- CALLERS MAY ASSUME: the returned TIs are queued and stamped (queued_by_job_id, queued_at), in
-- queue order; nothing else changed. It may be called twice in one transaction.
CREATE OR REPLACE FUNCTION queue_tis_v2(p_max_tis int, p_job_id bigint DEFAULT NULL,
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
    v_drain_all boolean;                 -- the whole deployment drains
    -- keyset cursor: the batch starts after this key of the queue order (NULL: the beginning)
    k_pw int; k_after timestamptz; k_map int; k_id bigint;
BEGIN
    -- The counts below must see what other transactions committed up to the moment the lock
    -- is taken; a REPEATABLE READ snapshot would be older than the lock.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'queue_tis_v2 needs READ COMMITTED isolation, not %', current_setting('transaction_isolation');
    END IF;
    PERFORM 1 FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE NOWAIT;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'scheduler_lock row queue_tis is missing; run `engine db upgrade`';
    END IF;

    IF to_regclass('pg_temp.qt2_cap_pool') IS NULL THEN
        -- Session-local scratch tables, emptied at commit; created once per connection. (Not
        -- v1's: a session may call both.) Free capacity, one table per kind of limit, each
        -- keyed by the columns that identify its partitions.
        CREATE TEMP TABLE qt2_cap_pool (pool text PRIMARY KEY, free int) ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE qt2_cap_run (dag_run_id bigint PRIMARY KEY, free int) ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE qt2_cap_task (dag_id text, task_id text, free int, PRIMARY KEY (dag_id, task_id))
            ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE qt2_cap_task_run (dag_run_id bigint, task_id text, free int, PRIMARY KEY (dag_run_id, task_id))
            ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE qt2_cap_executor (executor text PRIMARY KEY, free int) ON COMMIT DELETE ROWS;
        CREATE TEMP TABLE qt2_page (id bigint, pool text, priority_weight int, run_after timestamptz,
                                   map_index int, pool_slots int, dag_run_id bigint, dag_id text,
                                   task_id text, executor text, page int, n int, rn int) ON COMMIT DELETE ROWS;
        -- pk, tk, mk, ek number the pool, task, (run, task) and executor partitions of a batch:
        -- the window passes sort on small integers instead of names.
        CREATE TEMP TABLE qt2_cand (rank int PRIMARY KEY, id bigint, pool text, pool_slots int,
                                   dag_run_id bigint, dag_id text, task_id text, executor text,
                                   pk int, tk int, mk int, ek int,
                                   free_p int, free_r int, free_t int, free_m int, free_e int,
                                   status char(1)) ON COMMIT DELETE ROWS;
    END IF;

    -- A second call in the same transaction finds the scratch tables still filled.
    DELETE FROM qt2_cap_pool; DELETE FROM qt2_cap_run; DELETE FROM qt2_cap_task;
    DELETE FROM qt2_cap_task_run; DELETE FROM qt2_cap_executor;
    DELETE FROM qt2_page; DELETE FROM qt2_cand;

    SELECT coalesce(bool_or(dp.is_draining), false) INTO v_drain_all FROM deployment dp;

    -- Free capacity of every limited partition, read once (no row: unlimited), by its key
    -- columns (limit_usage's `key` is a label only).
    WITH u AS MATERIALIZED (
        SELECT l.kind, l.dag_run_id, l.dag_id, l.task_id, l.pool, l.executor, l.free FROM limit_usage l
    ), k_pool AS (
        INSERT INTO qt2_cap_pool SELECT u.pool, u.free FROM u WHERE u.kind = 'pool'
    ), k_run AS (
        INSERT INTO qt2_cap_run SELECT u.dag_run_id, u.free FROM u WHERE u.kind = 'run'
    ), k_task AS (
        INSERT INTO qt2_cap_task SELECT u.dag_id, u.task_id, u.free FROM u WHERE u.kind = 'task'
    ), k_task_run AS (
        INSERT INTO qt2_cap_task_run SELECT u.dag_run_id, u.task_id, u.free FROM u WHERE u.kind = 'task_run'
    )
    INSERT INTO qt2_cap_executor SELECT u.executor, u.free FROM u WHERE u.kind = 'executor';

    WHILE v_left > 0 AND NOT v_last LOOP
        -- 1. A page per pool with room.
        INSERT INTO qt2_page
        SELECT x.*
        FROM (
            SELECT p.name,
                   CASE WHEN k.free IS NULL THEN v_page_max
                        ELSE least(v_page_max, v_factor * k.free + 8) END AS page,
                   k.free
            FROM pool p
            LEFT JOIN qt2_cap_pool k ON k.pool = p.name
            WHERE p.slots < 0 OR k.free >= 1   -- only pools that have a row: an unknown pool is never read
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
        FROM qt2_page g WHERE g.n = g.page AND g.rn = g.n
        ORDER BY g.priority_weight DESC, g.run_after, g.map_index, g.id
        LIMIT 1;
        IF NOT FOUND THEN
            v_last := true;   -- every open pool was read to its end
        ELSE
            DELETE FROM qt2_page g
            WHERE g.priority_weight < k_pw
               OR (g.priority_weight = k_pw AND (g.run_after, g.map_index, g.id) > (k_after, k_map, k_id));
        END IF;

        -- 3. Prune what greedy would refuse anyway; rank the rest in queue order.
        INSERT INTO qt2_cand
        SELECT row_number() OVER (ORDER BY g.priority_weight DESC, g.run_after, g.map_index, g.id),
               g.id, g.pool, g.pool_slots, g.dag_run_id, g.dag_id, g.task_id, g.executor,
               dense_rank() OVER (ORDER BY g.pool), dense_rank() OVER (ORDER BY g.dag_id, g.task_id),
               dense_rank() OVER (ORDER BY g.dag_run_id, g.task_id), dense_rank() OVER (ORDER BY g.executor),
               kp.free, kr.free, kt.free, km.free, ke.free, 'u'
        FROM qt2_page g
        JOIN dag_run r ON r.id = g.dag_run_id AND r.state = 'running'
        JOIN dag d ON d.dag_id = g.dag_id AND d.is_active
        JOIN task t ON t.dag_id = g.dag_id AND t.task_id = g.task_id AND t.is_active
        JOIN executor ex ON ex.name = g.executor
        LEFT JOIN qt2_cap_pool kp ON kp.pool = g.pool
        LEFT JOIN qt2_cap_run kr ON kr.dag_run_id = g.dag_run_id
        LEFT JOIN qt2_cap_task kt ON kt.dag_id = g.dag_id AND kt.task_id = g.task_id
        LEFT JOIN qt2_cap_task_run km ON km.dag_run_id = g.dag_run_id AND km.task_id = g.task_id
        LEFT JOIN qt2_cap_executor ke ON ke.executor = g.executor
        WHERE (kp.free IS NULL OR kp.free >= g.pool_slots)
          AND (kr.free IS NULL OR kr.free >= 1)
          AND (kt.free IS NULL OR kt.free >= 1)
          AND (km.free IS NULL OR km.free >= 1)
          AND (ke.free IS NULL OR ke.free >= 1)
          AND ((NOT d.is_paused AND NOT d.is_draining AND NOT v_drain_all)
               OR EXISTS (SELECT 1 FROM task_instance x WHERE x.id = g.id AND x.next_method IS NOT NULL));
        DELETE FROM qt2_page;

        -- 4. Passes until the first v_left accepted are known (max_tis aside, see below).
        LOOP
            -- Accept: the running demand of everything not rejected fits every limit.
            WITH w AS (
                SELECT c.id, c.status, c.pool_slots, c.free_p, c.free_r, c.free_t, c.free_m, c.free_e,
                       sum(c.pool_slots) OVER wp AS p_sum, count(*) OVER wr AS r_sum, count(*) OVER wt AS t_sum,
                       count(*) OVER wm AS m_sum, count(*) OVER we AS e_sum
                FROM qt2_cand c
                WHERE c.status <> 'r'   -- a rejected candidate uses nothing
                WINDOW wp AS (PARTITION BY c.pk ORDER BY c.rank), wr AS (PARTITION BY c.dag_run_id ORDER BY c.rank),
                       wt AS (PARTITION BY c.tk ORDER BY c.rank), wm AS (PARTITION BY c.mk ORDER BY c.rank),
                       we AS (PARTITION BY c.ek ORDER BY c.rank)
            )
            UPDATE qt2_cand c SET status = 'a' FROM w
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
                FROM qt2_cand c
                WHERE c.status <> 'r'
                WINDOW wp AS (PARTITION BY c.pk ORDER BY c.rank), wr AS (PARTITION BY c.dag_run_id ORDER BY c.rank),
                       wt AS (PARTITION BY c.tk ORDER BY c.rank), wm AS (PARTITION BY c.mk ORDER BY c.rank),
                       we AS (PARTITION BY c.ek ORDER BY c.rank)
            )
            UPDATE qt2_cand c SET status = 'r' FROM w
            WHERE c.id = w.id AND w.status = 'u'
              AND (w.p_acc + w.pool_slots > w.free_p OR w.r_acc + 1 > w.free_r OR w.t_acc + 1 > w.free_t
                   OR w.m_acc + 1 > w.free_m OR w.e_acc + 1 > w.free_e);

            -- Done when everything ahead of the first undecided candidate is decided and holds
            -- v_left accepted: what comes after cannot be among the first v_left.
            SELECT min(c.rank) INTO v_first_open FROM qt2_cand c WHERE c.status = 'u';
            EXIT WHEN v_first_open IS NULL
                   OR (SELECT count(*) FROM qt2_cand c WHERE c.status = 'a' AND c.rank < v_first_open) >= v_left;
        END LOOP;

        -- max_tis: greedy with a limit of n takes the first n of what greedy without it takes,
        -- so the passes ignore it; only the first v_left accepted are kept.
        UPDATE qt2_cand c SET status = 'x'
        FROM (SELECT c2.rank FROM qt2_cand c2 WHERE c2.status = 'a' ORDER BY c2.rank OFFSET v_left) extra
        WHERE c.rank = extra.rank;

        -- 5. Charge what this batch took to every partition.
        UPDATE qt2_cap_pool k SET free = k.free - u.used
        FROM (SELECT c.pool, sum(c.pool_slots)::int AS used FROM qt2_cand c WHERE c.status = 'a' GROUP BY c.pool) u
        WHERE k.pool = u.pool;
        UPDATE qt2_cap_run k SET free = k.free - u.used
        FROM (SELECT c.dag_run_id, count(*)::int AS used FROM qt2_cand c WHERE c.status = 'a' GROUP BY c.dag_run_id) u
        WHERE k.dag_run_id = u.dag_run_id;
        UPDATE qt2_cap_task k SET free = k.free - u.used
        FROM (SELECT c.dag_id, c.task_id, count(*)::int AS used
              FROM qt2_cand c WHERE c.status = 'a' GROUP BY c.dag_id, c.task_id) u
        WHERE k.dag_id = u.dag_id AND k.task_id = u.task_id;
        UPDATE qt2_cap_task_run k SET free = k.free - u.used
        FROM (SELECT c.dag_run_id, c.task_id, count(*)::int AS used
              FROM qt2_cand c WHERE c.status = 'a' GROUP BY c.dag_run_id, c.task_id) u
        WHERE k.dag_run_id = u.dag_run_id AND k.task_id = u.task_id;
        UPDATE qt2_cap_executor k SET free = k.free - u.used
        FROM (SELECT c.executor, count(*)::int AS used FROM qt2_cand c WHERE c.status = 'a' GROUP BY c.executor) u
        WHERE k.executor = u.executor;

        SELECT v_accepted || coalesce(array_agg(c.id ORDER BY c.rank), '{}'), count(*)
        INTO v_accepted, v_n
        FROM qt2_cand c WHERE c.status = 'a';
        v_left := v_left - v_n;
        DELETE FROM qt2_cand;
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
