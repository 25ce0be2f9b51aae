-- queue_tis_v23(max_tis, job_id, now, page_factor): the critical section on PostgreSQL.
-- queue_tis_v22 (read sql/postgresql/queue_tis_v22.sql for its short refused heads not read for
-- their reasons, sql/postgresql/queue_tis_v21.sql for its first pages sized by the session's last
-- call, which v23 keeps under its own setting engine.qt23_factor, sql/postgresql/queue_tis_v20.sql
-- for its partitions numbered per group, sql/postgresql/queue_tis_v19.sql for its GROUPS, and
-- sql/postgresql/queue_tis_v11.sql for the contract: arguments, knobs, result columns, lock, rule,
-- counters, skip entries, batches) with one change that only changes what a call costs:
--   * THE CHECK POINTS ARE COUNTED OVER THE CANDIDATES, NOT THE PAGE. A check point (the last row
--     of a full page, at most one a pool) needs how many candidates come before or at it in queue
--     order, and its pool's partition number. v22 joined every page row to its candidate and
--     sorted the whole page twice (a running count in queue order, a maximum by pool) to keep the
--     check points: in the 1,000,000 world, pages of thousands of rows a batch for ~1,300
--     candidates, 23 ms of a ~150 ms call (auto_explain). v23 sorts the candidates and the check
--     points together (a running count of the candidates only: a check point that is a candidate
--     too is its own peer, so it counts itself, as before) and takes a pool's number from its
--     candidates grouped by pool. The same arrays, so the same walk.
--     Measured (loadtests/baselines/commit_ab.py, v22 against this text under another number):
--     drain of 1,000,000 0.858, 0.926 call by call; 100,000 1.011 and small passes 0.979 (noise).
-- Scratch tables are v23's own (qt23_*; its candidates carry their key in queue order), so v22 and
-- v23 may run in one session. Sections named in capitals below (KNOBS, RUN'S DAG, SKIPPED
-- PREFIXES, SYNCHRONOUS COMMIT OFF, JIT OFF) are v11's header; GROUPS is v19's.
-- LOCK: v11's (no lock when there is nothing to decide; otherwise scheduler_lock('queue_tis'),
-- FOR UPDATE NOWAIT: SQLSTATE 55P03 at once when another scheduler holds it), the same row as
-- every version, so old and new schedulers serialize during a rolling upgrade. The checks take
-- no lock of their own: dropping skip entries and stamping TIs again only make the walk read more.
-- INVARIANT: no limit is exceeded; a TI is queued once (compare-and-set on 'scheduled'); slots
-- a reservation holds go to its TI only. CALLERS MAY ASSUME: v11's (the returned TIs are queued
-- and stamped, in priority order; pool_reservation, queue_skip and queue_skip_part may change).
CREATE OR REPLACE FUNCTION queue_tis_v23(p_max_tis int, p_job_id bigint DEFAULT NULL,
                                        p_now timestamptz DEFAULT NULL, p_page_factor int DEFAULT 2)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int,
               try_number int, pool text, queue text, executor text, priority_weight int)
LANGUAGE plpgsql
-- (No JIT: see JIT OFF in v11's header.)
SET jit = off
AS $$
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    v_left     int := p_max_tis;         -- how many more this call may queue
    v_page_max int := greatest(64, least(p_max_tis * 4, 10000));
    v_last     boolean := false;         -- the current batch reaches the end of every pool
    v_share int;
    v_open int;
    v_factor   int := p_page_factor;     -- page rows per free slot; doubles batch after batch
    v_start int;                         -- the first batch's factor
    v_batches int := 0;                  -- batches run
    v_first_taken int;                   -- TIs the first batch took
    v_learned text := current_setting('engine.qt23_factor', true);   -- see THE FIRST BATCH'S PAGES
    v_accepted bigint[] := '{}';
    v_batch    bigint[];                 -- taken in this batch
    v_drain_all boolean;                 -- the whole deployment drains
    -- The knobs (see KNOBS in v11's header): read once, then cleared, so they apply to this call only.
    v_reserve_after double precision := coalesce(nullif(current_setting('engine.reserve_after', true), '')::double precision, 0);
    -- (How many TIs a new skip entry covers at least: engine.skip_min, unset or '': 32; read after
    -- the check below, which clears a value that is not a whole number.)
    v_skip_min int;
    v_skip_min_text text := current_setting('engine.skip_min', true);
    v_xmax     bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
    v_xmin     bigint;                   -- every row version this call cannot see has a sched_xid >= this
    v_first    boolean := true;          -- the first batch (skip entries are extended from its pages)
    v_arr      boolean := false;         -- some TI ahead of a skip entry's bound is not covered by it
    v_lo       bigint := -9223372036854775807;   -- ahead of every -priority_weight: a pool's start
    v_has_res  boolean := false;         -- some reservation is left after the drops
    v_free     int;
    v_fr int; v_ft int; v_fm int; v_fe int;   -- a reserving TI's free run, task, (run, task), executor capacity
    rv           record;                -- a reservation (R3)
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
    -- the batch's check points (step 2), in queue order: how many candidates come before or at
    -- each, its pool's partition number (NULL: the pool has no candidate in the batch), its key
    c_pos int[]; c_pk int[]; c_pw int[]; c_after timestamptz[]; c_map int[]; c_id bigint[];
    j int;
    v_cut int;                           -- the check point the batch ended at (NULL: none)
    v_static boolean;                    -- the batch was cut before the walk (step 2)
BEGIN
    -- queue_tis_v14's checks (engine.skip_min not a whole number; transaction ids from another
    -- cluster), as v14 ran them before calling v11.
    -- (Up to 9 digits: always inside int.)
    IF coalesce(v_skip_min_text, '') <> '' AND v_skip_min_text !~ '^\s*[+-]?[0-9]{1,9}\s*$' THEN
        RAISE WARNING 'engine.skip_min = % is not a whole number: queue_tis uses 32; fix it with ALTER DATABASE % SET engine.skip_min = 32 (or RESET engine.skip_min)',
            quote_literal(v_skip_min_text), quote_ident(current_database());
        PERFORM set_config('engine.skip_min', '', true);
    END IF;
    -- (max() over an index's end: one entry read, whatever the statistics say.)
    IF (SELECT max(s.seen_xmin) FROM queue_skip s) >= v_xmax
       OR (SELECT max(t.sched_xid) FROM task_instance t WHERE t.state = 'scheduled') >= v_xmax THEN
        RAISE WARNING 'queue_tis: transaction ids from another cluster in queue_skip or task_instance.sched_xid (a restored dump?): skip entries dropped, scheduled TIs stamped again';
        DELETE FROM queue_skip_part;
        DELETE FROM queue_skip;
        UPDATE task_instance t SET sched_xid = NULL WHERE t.state = 'scheduled' AND t.sched_xid >= v_xmax;
    END IF;
    v_skip_min := coalesce(nullif(current_setting('engine.skip_min', true), '')::int, 32);

    -- WITH AGING ON: queue_tis_v10, which reads the knobs (the queue order then moves with time:
    -- no skip entry can hold).
    IF coalesce(nullif(current_setting('engine.aging_rate', true), '')::double precision, 0) > 0
       AND coalesce(nullif(current_setting('engine.aging_cap', true), '')::int, 0) > 0 THEN
        PERFORM set_config('engine.skip_min', '', true);
        RETURN QUERY SELECT * FROM queue_tis_v10(p_max_tis, p_job_id, p_now, p_page_factor);
        RETURN;
    END IF;
    -- NOTHING TO DECIDE (queue_tis_v7's check): no scheduled TI and no reservation.
    IF NOT EXISTS (SELECT 1 FROM task_instance t WHERE t.state = 'scheduled')
       AND NOT EXISTS (SELECT 1 FROM pool_reservation x) THEN
        PERFORM set_config('engine.aging_rate', '', true), set_config('engine.aging_cap', '', true),
                set_config('engine.reserve_after', '', true),
                set_config('engine.skip_min', '', true);
        RETURN;
    END IF;
    -- The counts below must see what other transactions committed up to the moment the lock
    -- is taken; a REPEATABLE READ snapshot would be older than the lock.
    PERFORM set_config('engine.aging_rate', '', true), set_config('engine.aging_cap', '', true),
            set_config('engine.reserve_after', '', true),
                set_config('engine.skip_min', '', true);
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'queue_tis_v23 needs READ COMMITTED isolation, not %', current_setting('transaction_isolation');
    END IF;
    PERFORM 1 FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE NOWAIT;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'scheduler_lock row queue_tis is missing; run `engine db upgrade`';
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);   -- see SYNCHRONOUS COMMIT OFF

    IF to_regclass('pg_temp.qt23_used_pool') IS NULL THEN
        -- Session-local scratch tables, created once per connection, emptied by each call (not
        -- v1..v4's: a session may call them all). What is used, per partition, by its key.
        CREATE TEMP TABLE qt23_used_pool (pool text PRIMARY KEY, n int) ON COMMIT PRESERVE ROWS;
        -- (cap: the partition's limit; n >= cap means full, and the page skips its TIs.)
        CREATE TEMP TABLE qt23_used_run (dag_run_id bigint PRIMARY KEY, n int, cap int) ON COMMIT PRESERVE ROWS;
        CREATE TEMP TABLE qt23_used_task (dag_id text, task_id text, n int, cap int, PRIMARY KEY (dag_id, task_id))
            ON COMMIT PRESERVE ROWS;
        CREATE TEMP TABLE qt23_used_task_run (dag_run_id bigint, task_id text, n int, cap int,
                                            PRIMARY KEY (dag_run_id, task_id)) ON COMMIT PRESERVE ROWS;
        CREATE TEMP TABLE qt23_used_executor (executor text PRIMARY KEY, n int, cap int) ON COMMIT PRESERVE ROWS;
        CREATE TEMP TABLE qt23_page (id bigint, pool text, priority_weight int, run_after timestamptz,
                                   map_index int, pool_slots int, dag_run_id bigint, dag_id text,
                                   task_id text, executor text, page int, n int, rn int,
                                   free int, ssum int) ON COMMIT PRESERVE ROWS;
        CREATE TEMP TABLE qt23_cand (rank int, id bigint, pool text, pool_slots int,
                                   priority_weight int, run_after timestamptz, map_index int,
                                   dag_run_id bigint, dag_id text, task_id text, executor text,
                                   pk int, rk int, tk int, mk int, ek int,
                                   free_p int, free_r int, free_t int, free_m int, free_e int) ON COMMIT PRESERVE ROWS;
        -- The skip entries that hold for this call (S0), the TIs they do not cover (sched_xid at
        -- or past the entry's xmin), and what step 1b reads to extend them.
        CREATE TEMP TABLE qt23_skip (pool text PRIMARY KEY, b_pw int, b_npw bigint, b_after timestamptz, b_map int,
                                     b_id bigint,
                                     x bigint, min_wide int, parts int) ON COMMIT PRESERVE ROWS;
        CREATE TEMP TABLE qt23_arr (id bigint, pool text, priority_weight int, run_after timestamptz, map_index int,
                                    pool_slots int, dag_run_id bigint, dag_id text, task_id text, executor text,
                                    ahead boolean) ON COMMIT PRESERVE ROWS;
        CREATE TEMP TABLE qt23_ext (pool text PRIMARY KEY, free int, f_npw bigint, f_after timestamptz, f_map int,
                                    f_id bigint) ON COMMIT PRESERVE ROWS;
        -- A batch's open pools: page rows, free slots, and L (the page reads past it).
        CREATE TEMP TABLE qt23_op (name text PRIMARY KEY, page int, free int, l_npw bigint, l_after timestamptz,
                                   l_map int, l_id bigint) ON COMMIT PRESERVE ROWS;
        -- A batch's groups (step 3a): free capacity, partition numbers, group number.
        CREATE TEMP TABLE qt23_grp (gid int, pool text, dag_run_id bigint, dag_id text, task_id text, pool_slots int,
                                    executor text, free_p int, free_r int, free_t int, free_m int, free_e int,
                                    runs_now boolean, pk int, rk int, tk int, mk int, ek int) ON COMMIT PRESERVE ROWS;
        CREATE TEMP TABLE qt23_reg (pool text, why int, dag_run_id bigint, dag_id text, task_id text, executor text,
                                    n bigint, min_slots int) ON COMMIT PRESERVE ROWS;
    END IF;

    -- Empty what earlier calls left (their rows outlive the commit): DELETE keeps the cached
    -- plans; past 2 MB of dead rows and index entries, one TRUNCATE (new files: replanned once).
    IF pg_total_relation_size('pg_temp.qt23_page') + pg_total_relation_size('pg_temp.qt23_cand')
       + pg_total_relation_size('pg_temp.qt23_used_pool') + pg_total_relation_size('pg_temp.qt23_used_run')
       + pg_total_relation_size('pg_temp.qt23_used_task') + pg_total_relation_size('pg_temp.qt23_used_task_run')
       + pg_total_relation_size('pg_temp.qt23_used_executor') + pg_total_relation_size('pg_temp.qt23_skip')
       + pg_total_relation_size('pg_temp.qt23_arr') + pg_total_relation_size('pg_temp.qt23_ext')
       + pg_total_relation_size('pg_temp.qt23_reg') + pg_total_relation_size('pg_temp.qt23_op') + pg_total_relation_size('pg_temp.qt23_grp') > 2097152 THEN
        TRUNCATE qt23_used_pool, qt23_used_run, qt23_used_task, qt23_used_task_run, qt23_used_executor, qt23_page, qt23_cand,
                 qt23_skip, qt23_arr, qt23_ext, qt23_reg, qt23_op, qt23_grp;
    ELSE
        DELETE FROM qt23_used_pool; DELETE FROM qt23_used_run; DELETE FROM qt23_used_task;
        DELETE FROM qt23_used_task_run; DELETE FROM qt23_used_executor;
        DELETE FROM qt23_page; DELETE FROM qt23_cand;
        DELETE FROM qt23_skip; DELETE FROM qt23_arr; DELETE FROM qt23_ext; DELETE FROM qt23_reg; DELETE FROM qt23_grp;
    END IF;

    SELECT coalesce(bool_or(dp.is_draining), false) INTO v_drain_all FROM deployment dp;

    -- 0. Usage from the counters (after folding in what changed since the last call:
    --    fold_usage_v1, under this call's lock). The counters count as limit_usage counts (a
    --    deferred TI holds its place only in a pool with include_deferred, and then in every
    --    limit). Read here: every pool's (few rows), and the run, task, (run, task) and executor
    --    partitions that are FULL (n >= the limit the fold stored beside the counter, a hint kept
    --    cheap to read, confirmed against the limit itself). So the scratch tables hold, per kind,
    --    the full partitions (n, cap) and, once charged, the partitions this call queued into
    --    (relative rows: n = what this call added, cap = what was free then); for any other
    --    partition the free capacity is its limit - its counter (read by key where needed).
    PERFORM fold_usage_v1();
    INSERT INTO qt23_used_pool SELECT u.pool, u.slots FROM used_pool u;
    -- (A run's DAG from dag_run, not from the counter's dag_id: see RUN'S DAG in v11's header.)
    INSERT INTO qt23_used_run
    SELECT u.dag_run_id, u.n, d.max_active_tasks
    FROM used_run u JOIN dag_run r ON r.id = u.dag_run_id JOIN dag d ON d.dag_id = r.dag_id
    WHERE u.n >= u.cap AND u.n >= d.max_active_tasks;
    INSERT INTO qt23_used_task
    SELECT u.dag_id, u.task_id, u.n, t.max_active_tis_per_dag
    FROM used_task u JOIN task t ON t.dag_id = u.dag_id AND t.task_id = u.task_id
    WHERE u.n >= u.cap AND u.n >= t.max_active_tis_per_dag;
    INSERT INTO qt23_used_task_run
    SELECT u.dag_run_id, u.task_id, u.n, t.max_active_tis_per_dagrun
    FROM used_task_run u JOIN dag_run r ON r.id = u.dag_run_id
    JOIN task t ON t.dag_id = r.dag_id AND t.task_id = u.task_id
    WHERE u.n >= u.cap AND u.n >= t.max_active_tis_per_dagrun;
    INSERT INTO qt23_used_executor
    SELECT u.executor, u.n, e.parallelism FROM used_executor u JOIN executor e ON e.name = u.executor
    WHERE u.n >= u.cap AND u.n >= e.parallelism;

    -- R1. Drop the reservations whose TI stopped waiting: no longer a scheduled candidate of the
    --     reservation's pool, or it can never fit that pool.
    --     (Each reservation probes its own TI by primary key: the OFFSET 0 keeps the planner from
    --     joining all scheduled TIs first, which v4's statement may do on stale statistics.)
    DELETE FROM pool_reservation x
    WHERE NOT EXISTS (
        SELECT 1
        FROM (SELECT b.* FROM task_instance b WHERE b.id = x.ti_id OFFSET 0) ti
        JOIN dag_run dr ON dr.id = ti.dag_run_id AND dr.state = 'running'
        JOIN dag d ON d.dag_id = ti.dag_id AND d.is_active
        JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id AND t.is_active
        JOIN executor ex ON ex.name = ti.executor
        JOIN pool p ON p.name = ti.pool AND p.slots >= ti.pool_slots
        WHERE ti.id = x.ti_id AND ti.state = 'scheduled' AND ti.pool = x.pool
          AND ((NOT d.is_paused AND NOT d.is_draining AND NOT v_drain_all) OR ti.next_method IS NOT NULL));

    -- R2. A 'wide' reservation for the first wide candidate (queue order) that waited reserve_after,
    --     in each limited pool that has none.
    IF coalesce(v_reserve_after, 0) > 0 THEN
        INSERT INTO pool_reservation (ti_id, pool, slots, reason, since)
        SELECT DISTINCT ON (w.pool) w.id, w.pool, w.pool_slots, 'wide', v_now
        FROM (
            SELECT ti.id, ti.pool, ti.pool_slots, ti.run_after, ti.map_index, ti.priority_weight AS eff
            FROM pool p
            JOIN task_instance ti ON ti.state = 'scheduled' AND ti.pool = p.name
                                 AND ti.pool_slots > 1 AND ti.pool_slots <= p.slots
            JOIN dag_run dr ON dr.id = ti.dag_run_id AND dr.state = 'running'
            JOIN dag d ON d.dag_id = ti.dag_id AND d.is_active
            JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id AND t.is_active
            JOIN executor ex ON ex.name = ti.executor
            WHERE p.slots >= 0
              AND coalesce(ti.updated_at, ti.run_after) <= v_now - v_reserve_after * interval '1 second'
              AND ((NOT d.is_paused AND NOT d.is_draining AND NOT v_drain_all) OR ti.next_method IS NOT NULL)
              AND NOT EXISTS (SELECT 1 FROM pool_reservation x WHERE x.pool = p.name AND x.reason = 'wide')
              AND NOT EXISTS (SELECT 1 FROM pool_reservation x WHERE x.ti_id = ti.id)
        ) w
        ORDER BY w.pool, w.eff DESC, w.run_after, w.map_index, w.id;
    END IF;

    -- R3. Reserving TIs first, in reservation order: queue one iff every limit has room for it,
    --     else it holds what its pool has free, up to its slots (counted as used from now on).
    FOR rv IN
        SELECT x.ti_id, x.pool, x.slots, ti.pool_slots, ti.dag_run_id, ti.dag_id, ti.task_id, ti.executor,
               p.slots AS pool_cap, d.max_active_tasks, t.max_active_tis_per_dag, t.max_active_tis_per_dagrun,
               ex.parallelism
        FROM pool_reservation x
        -- (Driven by the reservations, a primary-key probe each, whatever the statistics say: v4's
        -- plain join read all of task_instance when pool_reservation had never been analyzed.)
        CROSS JOIN LATERAL (SELECT b.* FROM task_instance b WHERE b.id = x.ti_id OFFSET 0) ti
        JOIN pool p ON p.name = x.pool
        JOIN dag d ON d.dag_id = ti.dag_id
        JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
        JOIN executor ex ON ex.name = ti.executor
        ORDER BY x.since, x.ti_id
    LOOP
        v_has_res := true;
        EXIT WHEN v_left = 0;
        v_free := rv.pool_cap - coalesce((SELECT u.n FROM qt23_used_pool u WHERE u.pool = rv.pool), 0);
        -- Free capacity per kind (NULL: no limit): the scratch row's, else limit - counter.
        v_fr := rv.max_active_tasks - coalesce((SELECT u.n - u.cap + rv.max_active_tasks FROM qt23_used_run u
                                                 WHERE u.dag_run_id = rv.dag_run_id),
                                                (SELECT c.n FROM used_run c WHERE c.dag_run_id = rv.dag_run_id), 0);
        v_ft := rv.max_active_tis_per_dag - coalesce((SELECT u.n - u.cap + rv.max_active_tis_per_dag FROM qt23_used_task u
                                                       WHERE u.dag_id = rv.dag_id AND u.task_id = rv.task_id),
                                                      (SELECT c.n FROM used_task c
                                                       WHERE c.dag_id = rv.dag_id AND c.task_id = rv.task_id), 0);
        v_fm := rv.max_active_tis_per_dagrun - coalesce((SELECT u.n - u.cap + rv.max_active_tis_per_dagrun
                                                          FROM qt23_used_task_run u
                                                          WHERE u.dag_run_id = rv.dag_run_id AND u.task_id = rv.task_id),
                                                         (SELECT c.n FROM used_task_run c
                                                          WHERE c.dag_run_id = rv.dag_run_id AND c.task_id = rv.task_id), 0);
        v_fe := rv.parallelism - coalesce((SELECT u.n - u.cap + rv.parallelism FROM qt23_used_executor u
                                            WHERE u.executor = rv.executor),
                                           (SELECT c.n FROM used_executor c WHERE c.executor = rv.executor), 0);
        IF v_free >= rv.pool_slots
           AND (v_fr IS NULL OR v_fr >= 1) AND (v_ft IS NULL OR v_ft >= 1)
           AND (v_fm IS NULL OR v_fm >= 1) AND (v_fe IS NULL OR v_fe >= 1) THEN
            v_accepted := v_accepted || rv.ti_id;
            v_left := v_left - 1;
            INSERT INTO qt23_used_pool AS u VALUES (rv.pool, rv.pool_slots)
            ON CONFLICT ON CONSTRAINT qt23_used_pool_pkey DO UPDATE SET n = u.n + excluded.n;
            -- (A partition new to the scratch tables gets a relative row: 1 taken of v_f* free.)
            IF v_fr IS NOT NULL THEN
                INSERT INTO qt23_used_run AS u VALUES (rv.dag_run_id, 1, v_fr)
                ON CONFLICT ON CONSTRAINT qt23_used_run_pkey DO UPDATE SET n = u.n + 1;
            END IF;
            IF v_ft IS NOT NULL THEN
                INSERT INTO qt23_used_task AS u VALUES (rv.dag_id, rv.task_id, 1, v_ft)
                ON CONFLICT ON CONSTRAINT qt23_used_task_pkey DO UPDATE SET n = u.n + 1;
            END IF;
            IF v_fm IS NOT NULL THEN
                INSERT INTO qt23_used_task_run AS u VALUES (rv.dag_run_id, rv.task_id, 1, v_fm)
                ON CONFLICT ON CONSTRAINT qt23_used_task_run_pkey DO UPDATE SET n = u.n + 1;
            END IF;
            IF v_fe IS NOT NULL THEN
                INSERT INTO qt23_used_executor AS u VALUES (rv.executor, 1, v_fe)
                ON CONFLICT ON CONSTRAINT qt23_used_executor_pkey DO UPDATE SET n = u.n + 1;
            END IF;
        ELSIF v_free > 0 THEN
            INSERT INTO qt23_used_pool AS u VALUES (rv.pool, least(rv.slots, v_free))
            ON CONFLICT ON CONSTRAINT qt23_used_pool_pkey DO UPDATE SET n = u.n + excluded.n;
        END IF;
    END LOOP;

    -- S0. THE SKIP ENTRIES THAT HOLD (queue_skip; SKIPPED PREFIXES in v11's header). An entry (pool, bound,
    --     xmin, min_wide, its partitions in queue_skip_part) says: every scheduled TI of the pool up
    --     to the bound in queue order whose sched_xid is below xmin is refused by the page, since
    --     a partition of the entry holds it (full) or it is at least min_wide slots wide. It holds
    --     while each of those partitions is full and the pool has fewer than min_wide free slots
    --     (checked here against this call's usage, after R3; usage only grows during a call, so it
    --     holds for every batch). An entry that no longer holds is dropped.
    --     Every row version this call cannot see was written by a transaction at or past v_xmin,
    --     and the trigger stamp_scheduled stamps a TI's sched_xid whenever it is written scheduled.
    v_xmin := pg_snapshot_xmin(pg_current_snapshot())::text::bigint;
    INSERT INTO qt23_skip
    SELECT s.pool, s.b_pw, -(s.b_pw::bigint), s.b_after, s.b_map, s.b_id, s.seen_xmin, s.min_wide,
           (SELECT count(*) FROM queue_skip_part q WHERE q.pool = s.pool)
    FROM queue_skip s
    JOIN pool p ON p.name = s.pool
    LEFT JOIN qt23_used_pool u ON u.pool = s.pool
    WHERE (s.min_wide IS NULL OR (p.slots >= 0 AND p.slots - coalesce(u.n, 0) < s.min_wide))
      AND NOT EXISTS (
          SELECT 1 FROM queue_skip_part q
          WHERE q.pool = s.pool
            AND NOT CASE q.kind
                WHEN 'run' THEN EXISTS (SELECT 1 FROM qt23_used_run r WHERE r.dag_run_id = q.dag_run_id AND r.n >= r.cap)
                WHEN 'task' THEN EXISTS (SELECT 1 FROM qt23_used_task r WHERE r.dag_id = q.dag_id AND r.task_id = q.task_id
                                                                           AND r.n >= r.cap)
                WHEN 'task_run' THEN EXISTS (SELECT 1 FROM qt23_used_task_run r WHERE r.dag_run_id = q.dag_run_id
                                                                                 AND r.task_id = q.task_id AND r.n >= r.cap)
                WHEN 'executor' THEN EXISTS (SELECT 1 FROM qt23_used_executor r WHERE r.executor = q.executor AND r.n >= r.cap)
                ELSE false END);
    IF EXISTS (SELECT 1 FROM queue_skip s WHERE NOT EXISTS (SELECT 1 FROM qt23_skip k WHERE k.pool = s.pool)) THEN
        DELETE FROM queue_skip_part q WHERE NOT EXISTS (SELECT 1 FROM qt23_skip k WHERE k.pool = q.pool);
        DELETE FROM queue_skip s WHERE NOT EXISTS (SELECT 1 FROM qt23_skip k WHERE k.pool = s.pool);
    END IF;
    -- What the entries do not cover: their pools' TIs written scheduled by a transaction at or past
    -- the entry's xmin (index task_instance_sched_xid); ahead: up to the bound (the others only
    -- tell that the entry's xmin may move).
    IF EXISTS (SELECT 1 FROM qt23_skip) THEN
        INSERT INTO qt23_arr
        SELECT a.id, a.pool, a.priority_weight, a.run_after, a.map_index, a.pool_slots, a.dag_run_id, a.dag_id,
               a.task_id, a.executor,
               (-(a.priority_weight::bigint), a.run_after, a.map_index, a.id) <= (k.b_npw, k.b_after, k.b_map, k.b_id)
        FROM (SELECT b.* FROM task_instance b
              WHERE b.state = 'scheduled' AND b.sched_xid >= (SELECT min(k.x) FROM qt23_skip k) OFFSET 0) a
        JOIN qt23_skip k ON k.pool = a.pool AND a.sched_xid >= k.x;
        v_arr := EXISTS (SELECT 1 FROM qt23_arr a WHERE a.ahead);
    END IF;

    -- THE FIRST BATCH'S PAGES: where the last call of this session left the factor.
    IF p_page_factor > 0 AND coalesce(v_learned, '') ~ '^[0-9]{1,3}$' THEN
        v_factor := greatest(p_page_factor, least(16, v_learned::int));
    END IF;
    v_start := v_factor;
    WHILE v_left > 0 AND NOT v_last LOOP
        -- Which kinds of limit have a full partition now (the page probes only those).
        f_run := EXISTS (SELECT 1 FROM qt23_used_run u WHERE u.n >= u.cap);
        f_task := EXISTS (SELECT 1 FROM qt23_used_task u WHERE u.n >= u.cap);
        f_task_run := EXISTS (SELECT 1 FROM qt23_used_task_run u WHERE u.n >= u.cap);
        f_executor := EXISTS (SELECT 1 FROM qt23_used_executor u WHERE u.n >= u.cap);

        -- A pool's share of the page rows: twice its part of what is left to queue (at least 2).
        SELECT count(*) INTO v_open FROM pool p LEFT JOIN qt23_used_pool u ON u.pool = p.name
        WHERE p.slots < 0 OR p.slots - coalesce(u.n, 0) >= 1;
        v_share := greatest(2, (2 * v_left + v_open - 1) / greatest(v_open, 1));

        -- 1. A page per pool with room (an unknown pool has no row in `pool`: never read), read past
        --    L: the later of the batch's start and the pool's skip entry's bound (index
        --    task_instance_queue_key, whose key -priority_weight, run_after, map_index, id ascends
        --    in queue order: one row comparison starts the scan at L).
        DELETE FROM qt23_op;
        INSERT INTO qt23_op
        SELECT q.name, q.page, q.free,
               CASE WHEN q.use_k THEN -(k_pw::bigint) ELSE coalesce(q.b_npw, v_lo) END,
               CASE WHEN q.use_k THEN k_after ELSE coalesce(q.b_after, '-infinity') END,
               CASE WHEN q.use_k THEN k_map ELSE coalesce(q.b_map, 0) END,
               CASE WHEN q.use_k THEN k_id ELSE coalesce(q.b_id, 0) END
        FROM (
            SELECT p.name,
                   CASE WHEN p.slots < 0 THEN least(v_page_max, (v_factor * least(v_left, v_share) + 1) / 2 + 4)
                        ELSE least(v_page_max, (v_factor * least(p.slots - coalesce(u.n, 0), v_left, v_share) + 1) / 2 + 4)
                   END AS page,
                   CASE WHEN p.slots >= 0 THEN p.slots - coalesce(u.n, 0) END AS free,
                   k.b_npw, k.b_after, k.b_map, k.b_id,
                   k_pw IS NOT NULL AND (k.pool IS NULL OR (-(k_pw::bigint), k_after, k_map, k_id)
                                                            > (k.b_npw, k.b_after, k.b_map, k.b_id)) AS use_k
            FROM pool p
            LEFT JOIN qt23_used_pool u ON u.pool = p.name
            LEFT JOIN qt23_skip k ON k.pool = p.name
            WHERE p.slots < 0 OR p.slots - coalesce(u.n, 0) >= 1
        ) q;
        INSERT INTO qt23_page
        SELECT x.*
        FROM qt23_op op
        CROSS JOIN LATERAL (
            SELECT y.*, op.page, count(*) OVER () AS n, row_number() OVER () AS rn,
                   op.free, sum(y.pool_slots) OVER () AS ssum
            FROM (
                SELECT ti.id, ti.pool, ti.priority_weight, ti.run_after, ti.map_index, ti.pool_slots,
                       ti.dag_run_id, ti.dag_id, ti.task_id, ti.executor
                FROM task_instance ti
                WHERE ti.state = 'scheduled' AND ti.pool = op.name
                  AND (-(ti.priority_weight::bigint), ti.run_after, ti.map_index, ti.id) > (op.l_npw, op.l_after, op.l_map, op.l_id)
                  -- Skip what greedy refuses anyway, before it takes a row of the page: wider than
                  -- the pool's free slots, or in a run, task, (run, task) or executor already full.
                  AND (op.free IS NULL OR ti.pool_slots <= op.free)
                  -- (A kind with no full partition is not probed at all.)
                  AND (NOT f_run OR NOT EXISTS (SELECT 1 FROM qt23_used_run u
                                                WHERE u.dag_run_id = ti.dag_run_id AND u.n >= u.cap))
                  AND (NOT f_task OR NOT EXISTS (SELECT 1 FROM qt23_used_task u
                                                 WHERE u.dag_id = ti.dag_id AND u.task_id = ti.task_id AND u.n >= u.cap))
                  AND (NOT f_task_run OR NOT EXISTS (SELECT 1 FROM qt23_used_task_run u
                                                     WHERE u.dag_run_id = ti.dag_run_id AND u.task_id = ti.task_id
                                                       AND u.n >= u.cap))
                  AND (NOT f_executor OR NOT EXISTS (SELECT 1 FROM qt23_used_executor u
                                                     WHERE u.executor = ti.executor AND u.n >= u.cap))
                  -- (A reserving TI was served or holds its slots: R3.)
                  AND (NOT v_has_res OR NOT EXISTS (SELECT 1 FROM pool_reservation x WHERE x.ti_id = ti.id))
                ORDER BY -(ti.priority_weight::bigint), ti.run_after, ti.map_index, ti.id
                LIMIT op.page
            ) y
        ) x;
        IF v_arr THEN
            -- 1a. The TIs the skip entries do not cover, ahead of their bounds (the same skips),
            --     merged into their pools' pages: each keeps its first `page` rows in queue order.
            INSERT INTO qt23_page
            SELECT ti.id, ti.pool, ti.priority_weight, ti.run_after, ti.map_index, ti.pool_slots, ti.dag_run_id,
                   ti.dag_id, ti.task_id, ti.executor, op.page, NULL, NULL, op.free, NULL
            FROM qt23_arr ti
            JOIN qt23_op op ON op.name = ti.pool
            WHERE ti.ahead
              AND (k_pw IS NULL OR (-(ti.priority_weight::bigint), ti.run_after, ti.map_index, ti.id)
                                   > (-(k_pw::bigint), k_after, k_map, k_id))
              AND (op.free IS NULL OR ti.pool_slots <= op.free)
              AND (NOT f_run OR NOT EXISTS (SELECT 1 FROM qt23_used_run u
                                            WHERE u.dag_run_id = ti.dag_run_id AND u.n >= u.cap))
              AND (NOT f_task OR NOT EXISTS (SELECT 1 FROM qt23_used_task u
                                             WHERE u.dag_id = ti.dag_id AND u.task_id = ti.task_id AND u.n >= u.cap))
              AND (NOT f_task_run OR NOT EXISTS (SELECT 1 FROM qt23_used_task_run u
                                                 WHERE u.dag_run_id = ti.dag_run_id AND u.task_id = ti.task_id
                                                   AND u.n >= u.cap))
              AND (NOT f_executor OR NOT EXISTS (SELECT 1 FROM qt23_used_executor u
                                                 WHERE u.executor = ti.executor AND u.n >= u.cap))
              AND (NOT v_has_res OR NOT EXISTS (SELECT 1 FROM pool_reservation x WHERE x.ti_id = ti.id));
            IF FOUND THEN
                DELETE FROM qt23_page g
                USING (SELECT h.id, h.page, row_number() OVER (PARTITION BY h.pool ORDER BY -(h.priority_weight::bigint),
                                                               h.run_after, h.map_index, h.id) AS r
                       FROM qt23_page h) o
                WHERE o.id = g.id AND o.r > o.page;
                UPDATE qt23_page g SET n = o.n, rn = o.rn, ssum = o.ssum
                FROM (SELECT h.id, count(*) OVER (PARTITION BY h.pool) AS n,
                             row_number() OVER (PARTITION BY h.pool ORDER BY -(h.priority_weight::bigint), h.run_after,
                                                h.map_index, h.id) AS rn,
                             sum(h.pool_slots) OVER (PARTITION BY h.pool) AS ssum
                      FROM qt23_page h) o
                WHERE o.id = g.id;
            END IF;
        END IF;

        IF v_first THEN
            v_first := false;
            -- 1b. EXTEND THE SKIP ENTRIES (SKIPPED PREFIXES in v11's header). In every pool read here, each TI
            --     past L ahead of the page's first row F (all of the pool past L when the page is
            --     empty) was refused by the page. The pools where some of those are not covered yet:
            --     the first TI past L (the pool's start, or its entry's bound when F is past it) is
            --     not F, or the entry does not cover some TIs up to its bound (qt23_arr).
            INSERT INTO qt23_ext (pool, free, f_npw, f_after, f_map, f_id)
            SELECT op.name, op.free, op.f_npw, op.f_after, op.f_map, op.f_id
            FROM (
                -- (No F: a key past every TI.)
                SELECT o.name, o.free, o.l_npw, o.l_after, o.l_map, o.l_id, f.id AS f_id0, k.pool IS NOT NULL AS has_entry,
                       coalesce(-(f.priority_weight::bigint), 9223372036854775807) AS f_npw,
                       coalesce(f.run_after, 'infinity') AS f_after, coalesce(f.map_index, 0) AS f_map,
                       coalesce(f.id, 0) AS f_id,
                       EXISTS (SELECT 1 FROM qt23_arr a WHERE a.pool = o.name AND a.ahead) AS arr
                FROM qt23_op o
                LEFT JOIN qt23_skip k ON k.pool = o.name
                LEFT JOIN qt23_page f ON f.pool = o.name AND f.rn = 1
                -- (F at or ahead of the bound: the entry stays as it is.)
                WHERE k.pool IS NULL OR f.id IS NULL
                   OR (-(f.priority_weight::bigint), f.run_after, f.map_index, f.id) > (k.b_npw, k.b_after, k.b_map, k.b_id)
            ) op
            LEFT JOIN LATERAL (
                SELECT b.id FROM task_instance b
                WHERE b.state = 'scheduled' AND b.pool = op.name
                  AND (-(b.priority_weight::bigint), b.run_after, b.map_index, b.id) > (op.l_npw, op.l_after, op.l_map, op.l_id)
                ORDER BY -(b.priority_weight::bigint), b.run_after, b.map_index, b.id
                LIMIT 1
            ) h ON true
            -- (A pool without an entry and without qt23_arr rows gets one only if at least
            -- engine.skip_min TIs lie past L ahead of F (the DELETE below): the skip_min-th of them,
            -- read here, is what lets its pool through. At most skip_min index rows a pool; the
            -- reasons of a head too short for an entry are not read.)
            LEFT JOIN LATERAL (
                SELECT 1 AS one FROM task_instance b
                WHERE NOT op.has_entry AND NOT op.arr
                  AND b.state = 'scheduled' AND b.pool = op.name
                  AND (-(b.priority_weight::bigint), b.run_after, b.map_index, b.id) > (op.l_npw, op.l_after, op.l_map, op.l_id)
                  AND -(b.priority_weight::bigint) <= op.f_npw   -- (ends the scan)
                  AND (-(b.priority_weight::bigint), b.run_after, b.map_index, b.id) < (op.f_npw, op.f_after, op.f_map, op.f_id)
                ORDER BY -(b.priority_weight::bigint), b.run_after, b.map_index, b.id
                OFFSET greatest(v_skip_min, 1) - 1
                LIMIT 1
            ) m ON true
            WHERE (h.id IS DISTINCT FROM op.f_id0 OR op.arr)
              AND (op.has_entry OR op.arr OR m.one IS NOT NULL);
            IF FOUND THEN
                -- Those TIs, read once more (index task_instance_queue_key from L, to the end of
                -- F's priority; the uncovered ones from qt23_arr), grouped by the reason the page
                -- refused each: 1-4 its run, task, (run, task) or executor is full, 5 it is wider
                -- than the pool's free slots, 0 neither (a reserving TI: R3).
                INSERT INTO qt23_reg
                SELECT r.pool, r.why, r.dag_run_id, r.dag_id, r.task_id, r.executor, count(*), min(r.pool_slots)
                FROM (
                    SELECT w.pool, w.pool_slots, w.why,
                           CASE WHEN w.why IN (1, 3) THEN w.dag_run_id END AS dag_run_id,
                           CASE WHEN w.why = 2 THEN w.dag_id END AS dag_id,
                           CASE WHEN w.why IN (2, 3) THEN w.task_id END AS task_id,
                           CASE WHEN w.why = 4 THEN w.executor END AS executor
                    FROM (SELECT g.*, CASE
                            WHEN EXISTS (SELECT 1 FROM qt23_used_run u WHERE u.dag_run_id = g.dag_run_id AND u.n >= u.cap) THEN 1
                            WHEN EXISTS (SELECT 1 FROM qt23_used_task u WHERE u.dag_id = g.dag_id AND u.task_id = g.task_id
                                                                          AND u.n >= u.cap) THEN 2
                            WHEN EXISTS (SELECT 1 FROM qt23_used_task_run u WHERE u.dag_run_id = g.dag_run_id
                                                                              AND u.task_id = g.task_id AND u.n >= u.cap) THEN 3
                            WHEN EXISTS (SELECT 1 FROM qt23_used_executor u WHERE u.executor = g.executor AND u.n >= u.cap) THEN 4
                            WHEN g.free IS NOT NULL AND g.pool_slots > g.free THEN 5
                            ELSE 0 END AS why
                    FROM (
                        SELECT e.pool, e.free, b.pool_slots, b.dag_run_id, b.dag_id, b.task_id, b.executor
                        FROM qt23_ext e
                        JOIN qt23_op o ON o.name = e.pool
                        CROSS JOIN LATERAL (
                            SELECT c.* FROM task_instance c
                            WHERE c.state = 'scheduled' AND c.pool = e.pool
                              AND (-(c.priority_weight::bigint), c.run_after, c.map_index, c.id)
                                  > (o.l_npw, o.l_after, o.l_map, o.l_id)
                              AND -(c.priority_weight::bigint) <= e.f_npw   -- (ends the scan)
                              AND (-(c.priority_weight::bigint), c.run_after, c.map_index, c.id)
                                  < (e.f_npw, e.f_after, e.f_map, e.f_id)
                            OFFSET 0   -- (an index range per pool, whatever the estimates)
                        ) b
                        UNION ALL
                        SELECT e.pool, e.free, a.pool_slots, a.dag_run_id, a.dag_id, a.task_id, a.executor
                        FROM qt23_ext e JOIN qt23_arr a ON a.pool = e.pool AND a.ahead
                    ) g
                    OFFSET 0) w
                ) r
                GROUP BY r.pool, r.why, r.dag_run_id, r.dag_id, r.task_id, r.executor;
                -- Extend (or make) an entry where every such TI has a reason of 1-5, the entry keeps
                -- at most 64 partitions, and a new entry covers at least engine.skip_min TIs (32;
                -- fewer are cheaper to read than to keep): its bound moves to the last of them past
                -- L, its xmin to v_xmin (what it now covers: every TI up to the bound this call could
                -- see), min_wide to the least width of reason 5. Elsewhere the entry stays as it was.
                DELETE FROM qt23_ext e
                USING (SELECT g.pool, sum(g.n) AS n, bool_or(g.why = 0) AS bad,
                              count(*) FILTER (WHERE g.why BETWEEN 1 AND 4) AS parts
                       FROM qt23_reg g GROUP BY g.pool) s
                WHERE s.pool = e.pool
                  AND (s.bad OR coalesce((SELECT k.parts FROM qt23_skip k WHERE k.pool = e.pool), 0) + s.parts > 64
                       OR (s.n < v_skip_min AND NOT EXISTS (SELECT 1 FROM qt23_skip k WHERE k.pool = e.pool)));
                DELETE FROM qt23_ext e WHERE NOT EXISTS (SELECT 1 FROM qt23_reg g WHERE g.pool = e.pool);
                INSERT INTO queue_skip_part (pool, kind, dag_run_id, dag_id, task_id, executor)
                SELECT g.pool, (ARRAY['run', 'task', 'task_run', 'executor'])[g.why], g.dag_run_id, g.dag_id, g.task_id,
                       g.executor
                FROM qt23_reg g JOIN qt23_ext e ON e.pool = g.pool
                WHERE g.why BETWEEN 1 AND 4
                  AND NOT EXISTS (SELECT 1 FROM queue_skip_part q
                                  WHERE q.pool = g.pool AND q.kind = (ARRAY['run', 'task', 'task_run', 'executor'])[g.why]
                                    AND q.dag_run_id IS NOT DISTINCT FROM g.dag_run_id
                                    AND q.dag_id IS NOT DISTINCT FROM g.dag_id
                                    AND q.task_id IS NOT DISTINCT FROM g.task_id
                                    AND q.executor IS NOT DISTINCT FROM g.executor);
                INSERT INTO queue_skip AS s (pool, b_pw, b_after, b_map, b_id, seen_xmin, min_wide)
                SELECT e.pool, coalesce(l.priority_weight, k.b_pw), coalesce(l.run_after, k.b_after),
                       coalesce(l.map_index, k.b_map), coalesce(l.id, k.b_id), v_xmin,
                       (SELECT min(g.min_slots) FROM qt23_reg g WHERE g.pool = e.pool AND g.why = 5)
                FROM qt23_ext e
                JOIN qt23_op o ON o.name = e.pool
                LEFT JOIN qt23_skip k ON k.pool = e.pool
                -- (The last TI past L ahead of F: a backward scan from F.)
                LEFT JOIN LATERAL (
                    SELECT c.priority_weight, c.run_after, c.map_index, c.id FROM task_instance c
                    WHERE c.state = 'scheduled' AND c.pool = e.pool
                      AND (-(c.priority_weight::bigint), c.run_after, c.map_index, c.id) < (e.f_npw, e.f_after, e.f_map, e.f_id)
                      AND -(c.priority_weight::bigint) >= o.l_npw   -- (ends the scan)
                      AND (-(c.priority_weight::bigint), c.run_after, c.map_index, c.id) > (o.l_npw, o.l_after, o.l_map, o.l_id)
                    ORDER BY -(c.priority_weight::bigint) DESC, c.run_after DESC, c.map_index DESC, c.id DESC
                    LIMIT 1
                ) l ON true
                WHERE l.id IS NOT NULL OR k.pool IS NOT NULL
                ON CONFLICT ON CONSTRAINT queue_skip_pkey DO UPDATE
                SET b_pw = excluded.b_pw, b_after = excluded.b_after, b_map = excluded.b_map, b_id = excluded.b_id,
                    seen_xmin = excluded.seen_xmin, min_wide = CASE WHEN s.min_wide IS NULL THEN excluded.min_wide
                                                                    WHEN excluded.min_wide IS NULL THEN s.min_wide
                                                                    ELSE least(s.min_wide, excluded.min_wide) END;
            END IF;
            -- An entry whose pool had TIs written scheduled since its xmin, none of them up to its
            -- bound: its xmin moves to v_xmin (the next call reads fewer of them).
            UPDATE queue_skip s SET seen_xmin = v_xmin
            FROM qt23_skip k
            WHERE k.pool = s.pool AND s.seen_xmin < v_xmin
              AND EXISTS (SELECT 1 FROM qt23_arr a WHERE a.pool = k.pool)
              AND NOT EXISTS (SELECT 1 FROM qt23_arr a WHERE a.pool = k.pool AND a.ahead);
        END IF;

        -- 2. Cut points: the last row of every full page (rows of its pool beyond it are unknown).
        --    A pool that its page cannot fill (unlimited, or its page's pool_slots sum to less than
        --    its free slots) has room left after its last row whatever the walk takes: the batch
        --    ends at the earliest such row (as v6 cut at every full page). The other full pages'
        --    last rows before it are CHECK POINTS for the walk (step 4).
        SELECT g.priority_weight, g.run_after, g.map_index, g.id INTO k_pw, k_after, k_map, k_id
        FROM qt23_page g WHERE g.n = g.page AND g.rn = g.n AND (g.free IS NULL OR g.ssum < g.free)
        ORDER BY g.priority_weight DESC, g.run_after, g.map_index, g.id
        LIMIT 1;
        v_static := FOUND;
        IF v_static THEN
            DELETE FROM qt23_page g
            WHERE g.priority_weight < k_pw
               OR (g.priority_weight = k_pw AND (g.run_after, g.map_index, g.id) > (k_after, k_map, k_id));
        END IF;

        -- 3. Prune; number the rest in queue order and each partition 1..n, with its free capacity
        --    (cap - used; NULL: no limit). Caps are read here, for this batch's partitions only:
        --    once per GROUP (the page rows of one pool, run, task, width and executor), and a row
        --    past the first N of its group in queue order is dropped (GROUPS in v19's header),
        --    unless its DAG is paused or draining (then only its resumes are candidates).
        --    3a. The groups with room in every limit: their free capacity, their partitions'
        --        numbers (dense from 1 over these groups; byte order, COLLATE "C", sorts several
        --        times faster than a linguistic collation) and a group number (gid).
        INSERT INTO qt23_grp
        SELECT row_number() OVER (), k.pool, k.dag_run_id, k.dag_id, k.task_id, k.pool_slots, k.executor,
               k.free_p, k.free_r, k.free_t, k.free_m, k.free_e, k.runs_now,
               dense_rank() OVER (ORDER BY k.pool COLLATE "C"), dense_rank() OVER (ORDER BY k.dag_run_id),
               dense_rank() OVER (ORDER BY k.dag_id COLLATE "C", k.task_id COLLATE "C"),
               dense_rank() OVER (ORDER BY k.dag_run_id, k.task_id COLLATE "C"),
               dense_rank() OVER (ORDER BY k.executor COLLATE "C")
        FROM (
            SELECT q.pool, q.dag_run_id, q.dag_id, q.task_id, q.pool_slots, q.executor,
                   CASE WHEN p.slots >= 0 THEN p.slots - coalesce(up.n, 0) END AS free_p,
                   CASE WHEN ur.dag_run_id IS NOT NULL THEN ur.cap - ur.n
                        ELSE d.max_active_tasks - coalesce(cr.n, 0) END AS free_r,
                   CASE WHEN ut.dag_id IS NOT NULL THEN ut.cap - ut.n
                        ELSE t.max_active_tis_per_dag - coalesce(ct.n, 0) END AS free_t,
                   CASE WHEN um.dag_run_id IS NOT NULL THEN um.cap - um.n
                        ELSE t.max_active_tis_per_dagrun - coalesce(cm.n, 0) END AS free_m,
                   CASE WHEN ue.executor IS NOT NULL THEN ue.cap - ue.n
                        ELSE ex.parallelism - coalesce(ce.n, 0) END AS free_e,
                   (NOT d.is_paused AND NOT d.is_draining AND NOT v_drain_all) AS runs_now
            FROM (SELECT DISTINCT h.pool, h.dag_run_id, h.dag_id, h.task_id, h.pool_slots, h.executor
                  FROM qt23_page h) q
            JOIN dag_run r ON r.id = q.dag_run_id AND r.state = 'running'
            JOIN dag d ON d.dag_id = q.dag_id AND d.is_active
            JOIN task t ON t.dag_id = q.dag_id AND t.task_id = q.task_id AND t.is_active
            JOIN executor ex ON ex.name = q.executor
            JOIN pool p ON p.name = q.pool
            LEFT JOIN qt23_used_pool up ON up.pool = q.pool
            LEFT JOIN qt23_used_run ur ON ur.dag_run_id = q.dag_run_id
            LEFT JOIN qt23_used_task ut ON ut.dag_id = q.dag_id AND ut.task_id = q.task_id
            LEFT JOIN qt23_used_task_run um ON um.dag_run_id = q.dag_run_id AND um.task_id = q.task_id
            LEFT JOIN qt23_used_executor ue ON ue.executor = q.executor
            LEFT JOIN used_run cr ON d.max_active_tasks IS NOT NULL AND cr.dag_run_id = q.dag_run_id
            LEFT JOIN used_task ct ON t.max_active_tis_per_dag IS NOT NULL AND ct.dag_id = q.dag_id
                                  AND ct.task_id = q.task_id
            LEFT JOIN used_task_run cm ON t.max_active_tis_per_dagrun IS NOT NULL AND cm.dag_run_id = q.dag_run_id
                                      AND cm.task_id = q.task_id
            LEFT JOIN used_executor ce ON ex.parallelism IS NOT NULL AND ce.executor = q.executor
        ) k
        WHERE (k.free_p IS NULL OR k.free_p >= k.pool_slots)
          AND (k.free_r IS NULL OR k.free_r >= 1)
          AND (k.free_t IS NULL OR k.free_t >= 1)
          AND (k.free_m IS NULL OR k.free_m >= 1)
          AND (k.free_e IS NULL OR k.free_e >= 1);
        --    3b. The candidates: the page rows of those groups, each within the first N of its
        --        group (row_number by gid), numbered in queue order.
        INSERT INTO qt23_cand
        SELECT row_number() OVER (ORDER BY z.priority_weight DESC, z.run_after, z.map_index, z.id),
               z.id, z.pool, z.pool_slots, z.priority_weight, z.run_after, z.map_index,
               z.dag_run_id, z.dag_id, z.task_id, z.executor,
               z.pk, z.rk, z.tk, z.mk, z.ek, z.free_p, z.free_r, z.free_t, z.free_m, z.free_e
        FROM (
            SELECT g.id, g.pool, g.pool_slots, g.dag_run_id, g.dag_id, g.task_id, g.executor, g.priority_weight,
                   g.run_after, g.map_index, k.pk, k.rk, k.tk, k.mk, k.ek, k.free_p, k.free_r, k.free_t, k.free_m,
                   k.free_e, k.runs_now,
                   row_number() OVER (PARTITION BY k.gid
                                      ORDER BY g.priority_weight DESC, g.run_after, g.map_index, g.id) AS grn
            FROM qt23_page g
            JOIN qt23_grp k ON k.pool = g.pool AND k.dag_run_id = g.dag_run_id AND k.task_id = g.task_id
               AND k.pool_slots = g.pool_slots AND k.executor = g.executor
        ) z
        WHERE (NOT z.runs_now OR z.grn <= least(v_left, z.free_p / z.pool_slots, z.free_r, z.free_t, z.free_m, z.free_e))
          AND (z.runs_now OR EXISTS (SELECT 1 FROM task_instance x WHERE x.id = z.id AND x.next_method IS NOT NULL));
        GET DIAGNOSTICS v_n = ROW_COUNT;
        -- The check points, each with the number of candidates up to it in queue order and its
        -- pool's partition number: one sort of the candidates and the check points together
        -- (not of the page: THE CHECK POINTS ARE COUNTED OVER THE CANDIDATES in the header).
        SELECT array_agg(w.pos ORDER BY w.priority_weight DESC, w.run_after, w.map_index, w.id),
               array_agg(p.pk ORDER BY w.priority_weight DESC, w.run_after, w.map_index, w.id),
               array_agg(w.priority_weight ORDER BY w.priority_weight DESC, w.run_after, w.map_index, w.id),
               array_agg(w.run_after ORDER BY w.priority_weight DESC, w.run_after, w.map_index, w.id),
               array_agg(w.map_index ORDER BY w.priority_weight DESC, w.run_after, w.map_index, w.id),
               array_agg(w.id ORDER BY w.priority_weight DESC, w.run_after, w.map_index, w.id)
        INTO c_pos, c_pk, c_pw, c_after, c_map, c_id
        FROM (SELECT v.*, count(*) FILTER (WHERE v.is_cand)
                             OVER (ORDER BY v.priority_weight DESC, v.run_after, v.map_index, v.id) AS pos
              FROM (SELECT c.pool, c.priority_weight, c.run_after, c.map_index, c.id, true AS is_cand, false AS chk
                    FROM qt23_cand c
                    UNION ALL
                    SELECT g.pool, g.priority_weight, g.run_after, g.map_index, g.id, false, true
                    FROM qt23_page g WHERE g.n = g.page AND g.rn = g.n) v) w
        LEFT JOIN (SELECT c.pool, max(c.pk) AS pk FROM qt23_cand c GROUP BY c.pool) p ON p.pool = w.pool
        WHERE w.chk;
        DELETE FROM qt23_page;

        -- 4. The greedy walk over the batch, in queue order. Before the first candidate after a
        --    check point: if that point's pool still has a free slot (or is unlimited, or has no
        --    candidate here), an unknown TI of it could come next, so the batch ends at the point;
        --    if the pool is full, nothing of it beyond its page can be queued: walk on.
        v_batch := '{}';
        v_cut := NULL;
        j := 1;
        f_p := NULL; f_r := NULL; f_t := NULL; f_m := NULL; f_e := NULL;
        IF v_n > 0 THEN
            SELECT array_agg(c.id), array_agg(c.pool_slots), array_agg(c.pk), array_agg(c.rk), array_agg(c.tk),
                   array_agg(c.mk), array_agg(c.ek)
            INTO a_id, a_slots, a_pk, a_rk, a_tk, a_mk, a_ek
            FROM (SELECT * FROM qt23_cand ORDER BY rank) c;   -- one sort; the aggregates keep its order
            -- Partition k's free capacity at position k (the numbers are dense from 1 over the
            -- groups of step 3a).
            SELECT (SELECT array_agg(x.f ORDER BY x.k) FROM (SELECT DISTINCT g.pk AS k, g.free_p AS f FROM qt23_grp g) x),
                   (SELECT array_agg(x.f ORDER BY x.k) FROM (SELECT DISTINCT g.rk AS k, g.free_r AS f FROM qt23_grp g) x),
                   (SELECT array_agg(x.f ORDER BY x.k) FROM (SELECT DISTINCT g.tk AS k, g.free_t AS f FROM qt23_grp g) x),
                   (SELECT array_agg(x.f ORDER BY x.k) FROM (SELECT DISTINCT g.mk AS k, g.free_m AS f FROM qt23_grp g) x),
                   (SELECT array_agg(x.f ORDER BY x.k) FROM (SELECT DISTINCT g.ek AS k, g.free_e AS f FROM qt23_grp g) x)
            INTO f_p, f_r, f_t, f_m, f_e;
            FOR i IN 1 .. v_n LOOP
                WHILE j <= coalesce(cardinality(c_pos), 0) AND c_pos[j] < i LOOP
                    IF c_pk[j] IS NULL OR f_p[c_pk[j]] IS NULL OR f_p[c_pk[j]] >= 1 THEN
                        v_cut := j;
                        EXIT;
                    END IF;
                    j := j + 1;
                END LOOP;
                EXIT WHEN v_cut IS NOT NULL;
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
        IF v_cut IS NULL AND v_left > 0 THEN
            -- (The check points after the last candidate.)
            WHILE j <= coalesce(cardinality(c_pos), 0) LOOP
                IF c_pk[j] IS NULL OR f_p[c_pk[j]] IS NULL OR f_p[c_pk[j]] >= 1 THEN
                    v_cut := j;
                    EXIT;
                END IF;
                j := j + 1;
            END LOOP;
        END IF;
        IF v_cut IS NOT NULL THEN
            -- The next batch starts after the check point.
            k_pw := c_pw[v_cut]; k_after := c_after[v_cut]; k_map := c_map[v_cut]; k_id := c_id[v_cut];
        ELSIF NOT v_static THEN
            v_last := true;   -- every open pool was read to its end, or to where it is full
        END IF;
        v_accepted := v_accepted || v_batch;

        -- 5. Charge what this batch took (only when another batch follows).
        IF v_left > 0 AND NOT v_last AND cardinality(v_batch) > 0 THEN
            INSERT INTO qt23_used_pool AS u
            SELECT c.pool, sum(c.pool_slots)::int FROM qt23_cand c WHERE c.id = ANY (v_batch) GROUP BY c.pool
            ON CONFLICT ON CONSTRAINT qt23_used_pool_pkey DO UPDATE SET n = u.n + excluded.n;
            -- (A partition new to these tables had nothing used: its cap is its free capacity.)
            INSERT INTO qt23_used_run AS u
            SELECT c.dag_run_id, count(*), min(c.free_r) FROM qt23_cand c
            WHERE c.id = ANY (v_batch) AND c.free_r IS NOT NULL GROUP BY c.dag_run_id
            ON CONFLICT ON CONSTRAINT qt23_used_run_pkey DO UPDATE SET n = u.n + excluded.n;
            INSERT INTO qt23_used_task AS u
            SELECT c.dag_id, c.task_id, count(*), min(c.free_t) FROM qt23_cand c
            WHERE c.id = ANY (v_batch) AND c.free_t IS NOT NULL GROUP BY c.dag_id, c.task_id
            ON CONFLICT ON CONSTRAINT qt23_used_task_pkey DO UPDATE SET n = u.n + excluded.n;
            INSERT INTO qt23_used_task_run AS u
            SELECT c.dag_run_id, c.task_id, count(*), min(c.free_m) FROM qt23_cand c
            WHERE c.id = ANY (v_batch) AND c.free_m IS NOT NULL GROUP BY c.dag_run_id, c.task_id
            ON CONFLICT ON CONSTRAINT qt23_used_task_run_pkey DO UPDATE SET n = u.n + excluded.n;
            INSERT INTO qt23_used_executor AS u
            SELECT c.executor, count(*), min(c.free_e) FROM qt23_cand c
            WHERE c.id = ANY (v_batch) AND c.free_e IS NOT NULL GROUP BY c.executor
            ON CONFLICT ON CONSTRAINT qt23_used_executor_pkey DO UPDATE SET n = u.n + excluded.n;
        END IF;
        DELETE FROM qt23_cand;
        DELETE FROM qt23_grp;
        -- Another batch means pruning or refusals ate this one: read deeper next time.
        v_factor := least(v_factor * 2, 256);
        v_batches := v_batches + 1;
        IF v_batches = 1 THEN
            v_first_taken := cardinality(v_batch);
        END IF;
    END LOOP;
    -- THE FIRST BATCH'S PAGES: where the next call of this session starts (session-wide: false).
    IF p_page_factor > 0 AND v_batches > 0 THEN
        PERFORM set_config('engine.qt23_factor',
                           greatest(p_page_factor, least(16, CASE WHEN v_batches = 1 THEN v_start * 3 / 4
                                                                  ELSE v_start::bigint * p_max_tis / greatest(v_first_taken, 1) END))::text,
                           false);
    END IF;

    IF v_has_res THEN
        DELETE FROM pool_reservation x WHERE x.ti_id = ANY (v_accepted);   -- R4. served
    END IF;

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
