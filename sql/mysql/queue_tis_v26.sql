-- queue_tis_v26(max_tis, job_id, now, page_factor): on MySQL/MariaDB, the critical section.
-- queue_tis_v24 (same arguments, knobs, result, lock, rule; read sql/mysql/queue_tis_v24.sql and
-- the files it names) with its deletes from shared tables led by its own copies, so that a call
-- waits for no writer:
--   * THE FOLD is fold_usage_v2, not v1. v1's delete of the folded rows could be planned as a
--     scan of usage_delta with locking reads (MariaDB, a few hundred rows to fold), which waits,
--     under this call's lock, for every delta row another transaction wrote and has not
--     committed: a worker finishing a TI, or a console left open until innodb_lock_wait_timeout
--     fails the call (error 1205). v2 drives that delete from its copy of the rows (each copied
--     row is committed, and only a fold deletes delta rows). Its scratch table is in Aria on
--     MariaDB (v1's was an InnoDB temporary table). Read sql/mysql/fold_usage_v2.sql.
--   * THE LOG's rows a call no longer needs: v24's `DELETE l FROM queue_skip_log l JOIN qt24_arr`
--     was planned by MariaDB as a scan of the log with locking reads, which waits for the log row
--     of every writer that made a TI scheduled in a pool with a skip entry and has not committed
--     (tests/test_queue_skip.py: error 1205 on v25). Here led by the copy (STRAIGHT_JOIN).
--   * THE SERVED RESERVATIONS' delete, led by the accepted ids the same way.
--   Everything else is v24's text, its scratch tables renamed (qt26_*: v24 and v26 may run in
--   one session) and its messages naming v26.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: v24's (the row scheduler_lock('queue_tis'), FOR UPDATE
-- SKIP LOCKED: error 3572 ER_LOCK_NOWAIT at once when another scheduler holds it; a pool's
-- queue_skip_gate row until the commit when a skip entry is made; no limit is exceeded, a TI is
-- queued once; slots a reservation holds go to its TI only; every skip entry's claim holds), and
-- the fold waits for no writer. Both dialects name the same procedures, and the named query
-- `queue_tis` calls v26 on both (PostgreSQL's v26 calls its v25).
CREATE PROCEDURE queue_tis_v26(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
proc: BEGIN
    DECLARE v_now        DATETIME(6);
    DECLARE v_left       INT;            -- how many more this call may queue
    DECLARE v_page_max   INT;
    DECLARE v_last       BOOLEAN DEFAULT FALSE;  -- the current batch reaches the end of every pool
    DECLARE v_n          INT;
    DECLARE v_first_open INT;            -- position of the first undecided candidate of the batch
    DECLARE v_cut        INT;
    DECLARE v_factor     INT;            -- page rows per free slot; doubles batch after batch
    DECLARE v_open       INT;            -- pools with room (a batch's)
    DECLARE v_share      INT;            -- a pool's share of the page rows
    DECLARE v_locked     INT;
    DECLARE v_isolation  VARCHAR(100);
    DECLARE v_drain_all  BOOLEAN;        -- the whole deployment drains
    DECLARE v_aging      BOOLEAN;        -- aging is on
    -- The knobs: user variables @engine_aging_rate, @engine_aging_cap, @engine_reserve_after
    -- (the named query sets them just before the CALL; NULL: 0, off), read once and cleared.
    DECLARE v_aging_rate DOUBLE DEFAULT COALESCE(@engine_aging_rate, 0);
    DECLARE v_aging_cap INT DEFAULT COALESCE(@engine_aging_cap, 0);
    DECLARE v_reserve_after DOUBLE DEFAULT COALESCE(@engine_reserve_after, 0);
    DECLARE v_has_res    BOOLEAN DEFAULT FALSE;  -- some reservation is left after the drops
    DECLARE v_done       BOOLEAN DEFAULT FALSE;
    DECLARE v_pool       VARCHAR(250);
    DECLARE v_page       INT;
    DECLARE v_free       INT;            -- the pool's free slots (NULL: unlimited)
    DECLARE f_run        BOOLEAN;        -- some partition of this kind is full
    DECLARE f_task       BOOLEAN;
    DECLARE f_task_run   BOOLEAN;
    DECLARE f_executor   BOOLEAN;
    -- keyset cursor: the batch starts after this key of the queue order (NULL: the beginning)
    DECLARE k_pw INT;
    DECLARE k_after DATETIME(6);
    DECLARE k_map INT;
    DECLARE k_id BIGINT;
    -- the earliest last row of a full page in this batch (NULL: none)
    DECLARE c_pw INT;
    DECLARE c_after DATETIME(6);
    DECLARE c_map INT;
    DECLARE c_id BIGINT;
    -- the last row of one pool's page
    DECLARE l_pw INT;
    DECLARE l_after DATETIME(6);
    DECLARE l_map INT;
    DECLARE l_id BIGINT;
    -- SKIP ENTRIES (see above): the pool's entry that holds for this call (b: its bound; NULL:
    -- none), where its page starts (s: the later of the bound and the keyset; NULL: its start),
    -- the page's first row (f), the new bound (n: the last TI found refused ahead of f).
    DECLARE b_pw INT;
    DECLARE b_after DATETIME(6);
    DECLARE b_map INT;
    DECLARE b_id BIGINT;
    DECLARE s_pw INT;
    DECLARE s_after DATETIME(6);
    DECLARE s_map INT;
    DECLARE s_id BIGINT;
    DECLARE f_pw INT;
    DECLARE f_after DATETIME(6);
    DECLARE f_map INT;
    DECLARE f_id BIGINT;
    DECLARE n_pw INT;
    DECLARE n_after DATETIME(6);
    DECLARE n_map INT;
    DECLARE n_id BIGINT;
    DECLARE v_reg BOOLEAN;                  -- the pool's first batch found refused TIs to cover
    DECLARE v_use_scan BOOLEAN DEFAULT FALSE;   -- step 1' reads the pool's refused head
    DECLARE v_reg_dirty BOOLEAN DEFAULT TRUE;   -- qt26_reg may hold another pool's rows
    DECLARE v_lim INT;
    DECLARE v_cnt INT;
    -- (How many TIs a new entry covers at least: @engine_skip_min, a whole number; else 32.)
    DECLARE v_skip_min INT DEFAULT 32;
    DECLARE v_first BOOLEAN DEFAULT TRUE;   -- the first batch (entries are made from its pages)
    DECLARE v_arr BOOLEAN DEFAULT FALSE;    -- some logged TI lies ahead of an entry's bound
    DECLARE v_log BOOLEAN DEFAULT FALSE;    -- queue_skip_log had rows
    DECLARE v_off INT;
    DECLARE e_n BIGINT;                     -- the refused TIs read to extend an entry, and:
    DECLARE e_bad INT;                      -- some of them refused for no partition nor width
    DECLARE e_parts INT;                    -- their full partitions
    DECLARE e_old INT;                      -- the partitions the entry has already
    DECLARE e_min_wide INT;                 -- the narrowest refused for its width
    DECLARE v_gate INT;
    DECLARE v_gate_held INT DEFAULT 0;      -- this call holds the pool's gate (taken before 1')
    DECLARE v_seq0 BIGINT;                  -- seq of the pool's page's first row (NULL: empty page)
    DECLARE v_merged BOOLEAN;               -- step 1a merged rows into the pool's page
    DECLARE v_tmp_engine VARCHAR(64);       -- the session's default_tmp_storage_engine, put back
    DECLARE v_heap BIGINT UNSIGNED;         -- the session's max_heap_table_size, put back
    DECLARE v_groups INT DEFAULT 0;         -- the most groups a batch of this call had
    DECLARE c_pools CURSOR FOR
        SELECT p.name, CASE WHEN p.slots < 0 THEN LEAST(v_page_max, (v_factor * LEAST(v_left, v_share) + 1) DIV 2 + 8)
                            ELSE LEAST(v_page_max,
                                       (v_factor * LEAST(p.slots - COALESCE(u.n, 0), v_left, v_share) + 1) DIV 2 + 8)
                       END,
               CASE WHEN p.slots >= 0 THEN p.slots - COALESCE(u.n, 0) END,
               k.b_pw, k.b_after, k.b_map, k.b_id
        FROM pool p
        LEFT JOIN qt26_used_pool u ON u.pool = p.name
        LEFT JOIN qt26_skip k ON k.pool = p.name
        WHERE p.slots < 0 OR p.slots - COALESCE(u.n, 0) >= 1   -- an unknown pool has no row: never read
        ORDER BY p.name;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SET @engine_usage_queued_at = NULL, @engine_usage_queued_by = NULL;  -- (left by a killed call)
    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET v_left = p_max_tis;
    SET v_page_max = GREATEST(64, LEAST(p_max_tis * 4, 10000));
    SET v_factor = COALESCE(p_page_factor, 2);
    SET v_aging = v_aging_rate > 0 AND v_aging_cap > 0;
    -- WITH AGING ON: queue_tis_v9, which reads the knobs (the queue order then moves with time:
    -- no skip entry can hold).
    IF v_aging THEN
        CALL queue_tis_v9(p_max_tis, p_job_id, p_now, p_page_factor);
        LEAVE proc;
    END IF;
    IF CAST(@engine_skip_min AS CHAR) REGEXP '^-?[0-9]{1,9}$' THEN
        SET v_skip_min = CAST(@engine_skip_min AS SIGNED);
    END IF;
    SET @engine_aging_rate = NULL, @engine_aging_cap = NULL, @engine_reserve_after = NULL;

    -- NOTHING TO DECIDE (queue_tis_v7's check): no scheduled TI and no reservation. The result
    -- set of a call that queued nothing (callers read one); no lock, no fold. (Plain SELECT ...
    -- INTO: a subquery in IF would take shared locks and wait, in MariaDB.)
    SELECT COUNT(*) INTO v_n FROM (SELECT 1 FROM task_instance t WHERE t.state = 'scheduled' LIMIT 1) s;
    SELECT COUNT(*) INTO v_locked FROM (SELECT 1 FROM pool_reservation x LIMIT 1) r;
    IF v_n = 0 AND v_locked = 0 THEN
        SELECT ti.id AS ti_id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, ti.pool, ti.queue,
               ti.executor, ti.priority_weight
        FROM task_instance ti WHERE 1 = 0;
        LEAVE proc;
    END IF;

    -- The counts below must see what other transactions committed up to the moment the lock
    -- is taken; a REPEATABLE READ snapshot would be older than the lock.
    SET @qt26_isolation = NULL;
    BEGIN
        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;  -- a variable the server lacks: the other one
        PREPARE qt26_iso FROM 'SELECT @@tx_isolation INTO @qt26_isolation';
        EXECUTE qt26_iso;
        DEALLOCATE PREPARE qt26_iso;
    END;
    IF @qt26_isolation IS NULL THEN
        BEGIN
            DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
            PREPARE qt26_iso FROM 'SELECT @@transaction_isolation INTO @qt26_isolation';
            EXECUTE qt26_iso;
            DEALLOCATE PREPARE qt26_iso;
        END;
    END IF;
    SET v_isolation = @qt26_isolation;
    IF v_isolation IS NOT NULL AND v_isolation <> 'READ-COMMITTED' THEN
        SET v_isolation = CONCAT('queue_tis_v26 needs READ COMMITTED isolation, not ', v_isolation);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_isolation;
    END IF;
    SELECT COUNT(*) INTO v_locked FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE SKIP LOCKED;
    IF v_locked = 0 THEN
        -- (A plain SELECT: a subquery in IF would take a shared lock and wait, in MariaDB.)
        SELECT COUNT(*) INTO v_locked FROM scheduler_lock l WHERE l.name = 'queue_tis';
        IF v_locked = 0 THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'scheduler_lock row queue_tis is missing; run `engine db upgrade`';
        END IF;
        SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 3572,
            MESSAGE_TEXT = 'queue_tis_v26 is busy: another scheduler holds scheduler_lock queue_tis';
    END IF;

    -- The usage counters take in what changed since the last call (under this call's lock).
    CALL fold_usage_v2(v_n);

    -- Session-local scratch tables, created once per connection, emptied here.
    -- (Not v4's tables: a session may call both.) Aria on MariaDB (v17), but for the small ones
    -- read by key, in MEMORY (see MEMORY, AND WHAT IT HOLDS above): the session's engine for
    -- temporary tables and its cap on a MEMORY table are switched for these statements only.
    SET v_tmp_engine = @@session.default_tmp_storage_engine, v_heap = @@session.max_heap_table_size;
    SET SESSION max_heap_table_size = 4294967296;
    IF VERSION() LIKE '%MariaDB%' THEN
        SET SESSION default_tmp_storage_engine = 'Aria';
    END IF;
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_used_pool (pool VARCHAR(250) PRIMARY KEY, n INT) ENGINE=MEMORY;
    -- (cap: the partition's limit; n >= cap means full, and the page skips its TIs.)
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_used_run (dag_run_id BIGINT PRIMARY KEY, n INT, cap INT) ENGINE=MEMORY;
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_used_task (
        dag_id VARCHAR(250), task_id VARCHAR(250), n INT, cap INT, PRIMARY KEY (dag_id, task_id)) ENGINE=MEMORY;
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_used_task_run (
        dag_run_id BIGINT, task_id VARCHAR(250), n INT, cap INT, PRIMARY KEY (dag_run_id, task_id)) ENGINE=MEMORY;
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_used_executor (executor VARCHAR(250) PRIMARY KEY, n INT, cap INT) ENGINE=MEMORY;
    -- (seq: the order the rows were written in, which is queue order within one pool's page
    -- until step 1a merges logged TIs into it: its first and last rows are read by seq.)
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_page (
        seq BIGINT AUTO_INCREMENT PRIMARY KEY, id BIGINT NOT NULL UNIQUE, pool VARCHAR(250), priority_weight INT, run_after DATETIME(6), map_index INT,
        pool_slots INT, dag_run_id BIGINT, dag_id VARCHAR(250), task_id VARCHAR(250), executor VARCHAR(250));
    -- pk, tk, mk, ek number the pool, task, (run, task) and executor partitions of a batch:
    -- the window passes sort on small integers instead of names. (gid: the candidate's group,
    -- whose names the charge of step 5 reads.)
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_cand (
        pos INT, id BIGINT, pool_slots INT, dag_run_id BIGINT, gid INT,
        pk INT, tk INT, mk INT, ek INT, free_p INT, free_r INT, free_t INT, free_m INT, free_e INT,
        status CHAR(1), PRIMARY KEY USING BTREE (pos)) ENGINE=MEMORY;
    -- A batch's groups (step 3a): names, free capacity, partition numbers, group number (gid).
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_grp (
        gid INT PRIMARY KEY, pool VARCHAR(250), dag_run_id BIGINT, dag_id VARCHAR(250), task_id VARCHAR(250),
        pool_slots INT, executor VARCHAR(250), free_p INT, free_r INT, free_t INT, free_m INT, free_e INT,
        runs_now BOOLEAN, pk INT, tk INT, mk INT, ek INT, KEY (dag_run_id, task_id)) ENGINE=MEMORY;
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_verdict (pos INT PRIMARY KEY) ENGINE=MEMORY;
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_accepted (id BIGINT PRIMARY KEY) ENGINE=MEMORY;
    -- The skip entries that hold for this call (S0), the logged TIs (queue_skip_log: ahead, at or
    -- before the bound of their pool's entry), what an extension read (by reason), the pools
    -- whose entry this call made or extended.
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_skip (
        pool VARCHAR(250) PRIMARY KEY, b_pw INT, b_after DATETIME(6), b_map INT, b_id BIGINT);
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_arr (
        log_id BIGINT PRIMARY KEY, id BIGINT, pool VARCHAR(250), priority_weight INT, run_after DATETIME(6),
        map_index INT, pool_slots INT, dag_run_id BIGINT, dag_id VARCHAR(250), task_id VARCHAR(250),
        executor VARCHAR(250), ahead BOOLEAN, KEY (pool));
    -- (Every scratch table has a primary key: InnoDB keeps the rows a DELETE removed from a
    -- temporary table without one, and each later read of it passed over them, call after call.)
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_reg (
        seq INT AUTO_INCREMENT PRIMARY KEY, why INT, dag_run_id BIGINT, dag_id VARCHAR(250), task_id VARCHAR(250), executor VARCHAR(250), n BIGINT,
        min_slots INT);
    CREATE TEMPORARY TABLE IF NOT EXISTS qt26_ext (pool VARCHAR(250) PRIMARY KEY);
    SET SESSION default_tmp_storage_engine = v_tmp_engine, SESSION max_heap_table_size = v_heap;
    DELETE FROM qt26_used_pool;
    DELETE FROM qt26_used_run;
    DELETE FROM qt26_used_task;
    DELETE FROM qt26_used_task_run;
    DELETE FROM qt26_used_executor;
    DELETE FROM qt26_page;
    DELETE FROM qt26_cand;
    DELETE FROM qt26_grp;
    DELETE FROM qt26_verdict;
    DELETE FROM qt26_accepted;
    DELETE FROM qt26_skip;
    DELETE FROM qt26_arr;
    DELETE FROM qt26_ext;

    SELECT COALESCE(MAX(dp.is_draining), FALSE) INTO v_drain_all FROM deployment dp;

    -- 0. What each limited partition uses, from the usage counters (v4 summed the active TIs
    --    here). The counters count as limit_usage counts (a deferred TI holds its place only in a
    --    pool with include_deferred, and then in every limit), hold a row per partition in use
    --    (none: 0) and, after the fold above, equal the recount of every transaction committed
    --    before it (usage_drift; docs/critical-section.md, "Usage counters"). Every pool's is
    --    copied; of the run, task, (run, task) and executor partitions only the FULL ones (n at
    --    or past the limit the fold stored beside the counter, a hint, confirmed against the
    --    limit read now), as PostgreSQL's queue_tis_v6 does. So the scratch rows hold, per kind,
    --    the full partitions (n, cap = the limit) and, once charged, the partitions this call
    --    queued into (relative rows: n = what this call added, cap = what was free then); for any
    --    other partition the free capacity is its limit - its counter, read by key where needed
    --    (R3, step 3). A stale hint costs page rows, never a wrong decision. A run's
    --    DAG is read from dag_run, not from the counter's dag_id column: that column is the one
    --    of the counter's first fold, and a fold whose deltas of one run id sum to 0 keeps the row
    --    as it was (only where run ids are reused, as the property tests' worlds do).
    INSERT INTO qt26_used_pool (pool, n) SELECT u.pool, u.slots FROM used_pool u;
    INSERT INTO qt26_used_run (dag_run_id, n, cap)
    SELECT u.dag_run_id, u.n, d.max_active_tasks
    FROM used_run u
    JOIN dag_run r ON r.id = u.dag_run_id
    JOIN dag d ON d.dag_id = r.dag_id
    WHERE u.n >= u.cap AND u.n >= d.max_active_tasks;
    INSERT INTO qt26_used_task (dag_id, task_id, n, cap)
    SELECT u.dag_id, u.task_id, u.n, t.max_active_tis_per_dag
    FROM used_task u JOIN task t ON t.dag_id = u.dag_id AND t.task_id = u.task_id
    WHERE u.n >= u.cap AND u.n >= t.max_active_tis_per_dag;
    INSERT INTO qt26_used_task_run (dag_run_id, task_id, n, cap)
    SELECT u.dag_run_id, u.task_id, u.n, t.max_active_tis_per_dagrun
    FROM used_task_run u
    JOIN dag_run r ON r.id = u.dag_run_id
    JOIN task t ON t.dag_id = r.dag_id AND t.task_id = u.task_id
    WHERE u.n >= u.cap AND u.n >= t.max_active_tis_per_dagrun;
    INSERT INTO qt26_used_executor (executor, n, cap)
    SELECT u.executor, u.n, e.parallelism
    FROM used_executor u JOIN executor e ON e.name = u.executor
    WHERE u.n >= u.cap AND u.n >= e.parallelism;

    -- R1. Drop the reservations whose TI stopped waiting: no longer a scheduled candidate of the
    --     reservation's pool, or it can never fit that pool.
    DELETE FROM pool_reservation
    WHERE NOT EXISTS (
        SELECT 1
        FROM task_instance ti
        JOIN dag_run dr ON dr.id = ti.dag_run_id AND dr.state = 'running'
        JOIN dag d ON d.dag_id = ti.dag_id AND d.is_active
        JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id AND t.is_active
        JOIN executor ex ON ex.name = ti.executor
        JOIN pool p ON p.name = ti.pool AND p.slots >= ti.pool_slots
        WHERE ti.id = pool_reservation.ti_id AND ti.state = 'scheduled' AND ti.pool = pool_reservation.pool
          AND ((NOT d.is_paused AND NOT d.is_draining AND NOT v_drain_all) OR ti.next_method IS NOT NULL));

    -- R2. A 'wide' reservation for the first wide candidate (queue order) that waited reserve_after,
    --     in each limited pool that has none.
    IF COALESCE(v_reserve_after, 0) > 0 THEN
        INSERT INTO pool_reservation (ti_id, pool, slots, reason, since)
        SELECT w.id, w.pool, w.pool_slots, 'wide', v_now
        FROM (
            SELECT ti.id, ti.pool, ti.pool_slots,
                   ROW_NUMBER() OVER (PARTITION BY ti.pool
                                      ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id) AS rn
            FROM pool p
            JOIN task_instance ti ON ti.state = 'scheduled' AND ti.pool = p.name
                                 AND ti.pool_slots > 1 AND ti.pool_slots <= p.slots
            JOIN dag_run dr ON dr.id = ti.dag_run_id AND dr.state = 'running'
            JOIN dag d ON d.dag_id = ti.dag_id AND d.is_active
            JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id AND t.is_active
            JOIN executor ex ON ex.name = ti.executor
            WHERE p.slots >= 0
              AND COALESCE(ti.updated_at, ti.run_after) <= v_now - INTERVAL ROUND(v_reserve_after * 1000000) MICROSECOND
              AND ((NOT d.is_paused AND NOT d.is_draining AND NOT v_drain_all) OR ti.next_method IS NOT NULL)
              AND NOT EXISTS (SELECT 1 FROM pool_reservation x WHERE x.pool = p.name AND x.reason = 'wide')
              AND NOT EXISTS (SELECT 1 FROM pool_reservation x WHERE x.ti_id = ti.id)
        ) w
        WHERE w.rn = 1;
    END IF;

    -- R3. Reserving TIs first, in reservation order: queue one iff every limit has room for it,
    --     else it holds what its pool has free, up to its slots (counted as used from now on).
    BEGIN
        DECLARE r_done BOOLEAN DEFAULT FALSE;
        DECLARE r_ti BIGINT;
        DECLARE r_pool VARCHAR(250);
        DECLARE r_slots INT;
        DECLARE r_ps INT;
        DECLARE r_run BIGINT;
        DECLARE r_dag VARCHAR(250);
        DECLARE r_task VARCHAR(250);
        DECLARE r_ex VARCHAR(250);
        DECLARE r_cap_p INT;
        DECLARE r_cap_r INT;
        DECLARE r_cap_t INT;
        DECLARE r_cap_m INT;
        DECLARE r_cap_e INT;
        DECLARE u_p INT;
        DECLARE f_r INT;                -- free run, task, (run, task), executor capacity (NULL: no limit)
        DECLARE f_t INT;
        DECLARE f_m INT;
        DECLARE f_e INT;
        DECLARE c_res CURSOR FOR
            SELECT x.ti_id, x.pool, x.slots, ti.pool_slots, ti.dag_run_id, ti.dag_id, ti.task_id, ti.executor,
                   p.slots, d.max_active_tasks, t.max_active_tis_per_dag, t.max_active_tis_per_dagrun, ex.parallelism
            FROM pool_reservation x
            JOIN task_instance ti ON ti.id = x.ti_id
            JOIN pool p ON p.name = x.pool
            JOIN dag d ON d.dag_id = ti.dag_id
            JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
            JOIN executor ex ON ex.name = ti.executor
            ORDER BY x.since, x.ti_id;
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET r_done = TRUE;
        OPEN c_res;
        res: LOOP
            FETCH c_res INTO r_ti, r_pool, r_slots, r_ps, r_run, r_dag, r_task, r_ex,
                             r_cap_p, r_cap_r, r_cap_t, r_cap_m, r_cap_e;
            IF r_done THEN
                LEAVE res;
            END IF;
            SET v_has_res = TRUE;
            IF v_left = 0 THEN
                LEAVE res;
            END IF;
            -- (Aggregates: a row even when nothing is used, so NOT FOUND never fires here.)
            SELECT COALESCE(MAX(u.n), 0) INTO u_p FROM qt26_used_pool u WHERE u.pool = r_pool;
            -- Free capacity per kind: the scratch row's (cap - n), else the limit - the counter.
            SET f_r = NULL, f_t = NULL, f_m = NULL, f_e = NULL;
            IF r_cap_r IS NOT NULL THEN
                SELECT MAX(u.cap - u.n) INTO f_r FROM qt26_used_run u WHERE u.dag_run_id = r_run;
                IF f_r IS NULL THEN
                    SELECT r_cap_r - COALESCE(MAX(c.n), 0) INTO f_r FROM used_run c WHERE c.dag_run_id = r_run;
                END IF;
            END IF;
            IF r_cap_t IS NOT NULL THEN
                SELECT MAX(u.cap - u.n) INTO f_t FROM qt26_used_task u WHERE u.dag_id = r_dag AND u.task_id = r_task;
                IF f_t IS NULL THEN
                    SELECT r_cap_t - COALESCE(MAX(c.n), 0) INTO f_t FROM used_task c
                    WHERE c.dag_id = r_dag AND c.task_id = r_task;
                END IF;
            END IF;
            IF r_cap_m IS NOT NULL THEN
                SELECT MAX(u.cap - u.n) INTO f_m FROM qt26_used_task_run u WHERE u.dag_run_id = r_run AND u.task_id = r_task;
                IF f_m IS NULL THEN
                    SELECT r_cap_m - COALESCE(MAX(c.n), 0) INTO f_m FROM used_task_run c
                    WHERE c.dag_run_id = r_run AND c.task_id = r_task;
                END IF;
            END IF;
            IF r_cap_e IS NOT NULL THEN
                SELECT MAX(u.cap - u.n) INTO f_e FROM qt26_used_executor u WHERE u.executor = r_ex;
                IF f_e IS NULL THEN
                    SELECT r_cap_e - COALESCE(MAX(c.n), 0) INTO f_e FROM used_executor c WHERE c.executor = r_ex;
                END IF;
            END IF;
            IF r_cap_p - u_p >= r_ps AND (f_r IS NULL OR f_r >= 1) AND (f_t IS NULL OR f_t >= 1)
               AND (f_m IS NULL OR f_m >= 1) AND (f_e IS NULL OR f_e >= 1) THEN
                INSERT INTO qt26_accepted (id) VALUES (r_ti);
                SET v_left = v_left - 1;
                INSERT INTO qt26_used_pool (pool, n) VALUES (r_pool, r_ps) ON DUPLICATE KEY UPDATE n = n + r_ps;
                IF r_cap_r IS NOT NULL THEN
                    INSERT INTO qt26_used_run (dag_run_id, n, cap) VALUES (r_run, 1, f_r)
                    ON DUPLICATE KEY UPDATE n = n + 1;
                END IF;
                IF r_cap_t IS NOT NULL THEN
                    INSERT INTO qt26_used_task (dag_id, task_id, n, cap) VALUES (r_dag, r_task, 1, f_t)
                    ON DUPLICATE KEY UPDATE n = n + 1;
                END IF;
                IF r_cap_m IS NOT NULL THEN
                    INSERT INTO qt26_used_task_run (dag_run_id, task_id, n, cap) VALUES (r_run, r_task, 1, f_m)
                    ON DUPLICATE KEY UPDATE n = n + 1;
                END IF;
                IF r_cap_e IS NOT NULL THEN
                    INSERT INTO qt26_used_executor (executor, n, cap) VALUES (r_ex, 1, f_e)
                    ON DUPLICATE KEY UPDATE n = n + 1;
                END IF;
            ELSEIF r_cap_p - u_p > 0 THEN
                INSERT INTO qt26_used_pool (pool, n) VALUES (r_pool, LEAST(r_slots, r_cap_p - u_p))
                ON DUPLICATE KEY UPDATE n = n + LEAST(r_slots, r_cap_p - u_p);
            END IF;
        END LOOP;
        CLOSE c_res;
    END;

    -- S0. THE SKIP ENTRIES THAT HOLD (SKIP ENTRIES above). An entry (pool, bound, min_wide, its
    --     partitions in queue_skip_part) says: every scheduled TI of the pool up to the bound in
    --     queue order that has no queue_skip_log row is refused by the page, since a partition of
    --     the entry holds it (full) or it is at least min_wide slots wide. It holds while each of
    --     those partitions is full and the pool has fewer than min_wide free slots (checked here
    --     against this call's usage, after R3; usage only grows during a call, so it holds for
    --     every batch). An entry that no longer holds is dropped (no gate needed: a writer logs
    --     more, never less, for it).
    INSERT INTO qt26_skip (pool, b_pw, b_after, b_map, b_id)
    SELECT s.pool, s.b_pw, s.b_after, s.b_map, s.b_id
    FROM queue_skip s
    JOIN pool p ON p.name = s.pool
    LEFT JOIN qt26_used_pool u ON u.pool = s.pool
    WHERE (s.min_wide IS NULL OR (p.slots >= 0 AND p.slots - COALESCE(u.n, 0) < s.min_wide))
      AND NOT EXISTS (
          SELECT 1 FROM queue_skip_part q
          WHERE q.pool = s.pool
            AND NOT CASE q.kind
                WHEN 'run' THEN EXISTS (SELECT 1 FROM qt26_used_run r WHERE r.dag_run_id = q.dag_run_id AND r.n >= r.cap)
                WHEN 'task' THEN EXISTS (SELECT 1 FROM qt26_used_task r WHERE r.dag_id = q.dag_id AND r.task_id = q.task_id
                                                                           AND r.n >= r.cap)
                WHEN 'task_run' THEN EXISTS (SELECT 1 FROM qt26_used_task_run r WHERE r.dag_run_id = q.dag_run_id
                                                                                 AND r.task_id = q.task_id AND r.n >= r.cap)
                WHEN 'executor' THEN EXISTS (SELECT 1 FROM qt26_used_executor r WHERE r.executor = q.executor
                                                                                 AND r.n >= r.cap)
                ELSE FALSE END);
    SELECT COUNT(*) INTO v_n FROM queue_skip s;
    SELECT v_n - COUNT(*) INTO v_n FROM qt26_skip;
    IF v_n > 0 THEN
        DELETE q FROM queue_skip_part q LEFT JOIN qt26_skip k ON k.pool = q.pool WHERE k.pool IS NULL;
        DELETE s FROM queue_skip s LEFT JOIN qt26_skip k ON k.pool = s.pool WHERE k.pool IS NULL;
    END IF;
    -- The logged TIs (read before any page: a log row seen here is a TI every page can see), each
    -- with its current key; ahead: still scheduled, at or before the bound of its pool's entry.
    SELECT COUNT(*) INTO v_n FROM (SELECT 1 FROM queue_skip_log l LIMIT 1) x;
    IF v_n > 0 THEN
        SET v_log = TRUE;
        INSERT INTO qt26_arr (log_id, id, pool, priority_weight, run_after, map_index, pool_slots, dag_run_id,
                              dag_id, task_id, executor, ahead)
        SELECT l.id, ti.id, ti.pool, ti.priority_weight, ti.run_after, ti.map_index, ti.pool_slots, ti.dag_run_id,
               ti.dag_id, ti.task_id, ti.executor,
               COALESCE(k.pool IS NOT NULL
                        AND (ti.priority_weight > k.b_pw
                             OR (ti.priority_weight = k.b_pw
                                 AND (ti.run_after < k.b_after
                                      OR (ti.run_after = k.b_after
                                          AND (ti.map_index < k.b_map OR (ti.map_index = k.b_map AND ti.id <= k.b_id)))))),
                        FALSE)
        FROM queue_skip_log l
        LEFT JOIN task_instance ti ON ti.id = l.ti_id AND ti.state = 'scheduled'
        LEFT JOIN qt26_skip k ON k.pool = ti.pool;
        SELECT COUNT(*) INTO v_n FROM qt26_arr a WHERE a.ahead;
        SET v_arr = v_n > 0;
    END IF;

    batches: WHILE v_left > 0 AND NOT v_last DO
        -- Which kinds of limit have a full partition now (the page probes only those).
        SELECT EXISTS (SELECT 1 FROM qt26_used_run u WHERE u.n >= u.cap),
               EXISTS (SELECT 1 FROM qt26_used_task u WHERE u.n >= u.cap),
               EXISTS (SELECT 1 FROM qt26_used_task_run u WHERE u.n >= u.cap),
               EXISTS (SELECT 1 FROM qt26_used_executor u WHERE u.n >= u.cap)
        INTO f_run, f_task, f_task_run, f_executor;

        -- 1. A page per pool with room, read past s: the later of the batch's start (the keyset)
        --    and the pool's skip entry's bound.
        SET c_pw = NULL, c_after = NULL, c_map = NULL, c_id = NULL;
        -- A pool's share of the page rows: twice its part of what is left to queue (at least 2).
        SELECT COUNT(*) INTO v_open FROM pool p LEFT JOIN qt26_used_pool u ON u.pool = p.name
        WHERE p.slots < 0 OR p.slots - COALESCE(u.n, 0) >= 1;
        SET v_share = GREATEST(2, (2 * v_left + v_open - 1) DIV GREATEST(v_open, 1));
        SET v_done = FALSE;
        OPEN c_pools;
        pools: LOOP
            FETCH c_pools INTO v_pool, v_page, v_free, b_pw, b_after, b_map, b_id;
            IF v_done THEN
                LEAVE pools;
            END IF;
            IF b_id IS NOT NULL
               AND (k_pw IS NULL OR k_pw > b_pw
                    OR (k_pw = b_pw AND (k_after < b_after OR (k_after = b_after
                        AND (k_map < b_map OR (k_map = b_map AND k_id <= b_id)))))) THEN
                SET s_pw = b_pw, s_after = b_after, s_map = b_map, s_id = b_id;
            ELSE
                SET s_pw = k_pw, s_after = k_after, s_map = k_map, s_id = k_id;
            END IF;
            SET v_use_scan = FALSE, v_reg = FALSE, n_id = NULL, v_gate_held = 0;
            INSERT INTO qt26_page (id, pool, priority_weight, run_after, map_index, pool_slots,
                                   dag_run_id, dag_id, task_id, executor)
            SELECT ti.id, ti.pool, ti.priority_weight, ti.run_after, ti.map_index, ti.pool_slots,
                   ti.dag_run_id, ti.dag_id, ti.task_id, ti.executor
            FROM task_instance ti FORCE INDEX (task_instance_queue_pool)
            WHERE ti.state = 'scheduled' AND ti.pool = v_pool
              AND (s_pw IS NULL
                   OR ti.priority_weight < s_pw
                   OR (ti.priority_weight = s_pw
                       AND (ti.run_after > s_after
                            OR (ti.run_after = s_after
                                AND (ti.map_index > s_map OR (ti.map_index = s_map AND ti.id > s_id))))))
              -- Skip what greedy refuses anyway, before it takes a row of the page: wider than the
              -- pool's free slots, or in a run, task, (run, task) or executor already full.
              AND (v_free IS NULL OR ti.pool_slots <= v_free)
              -- (A kind with no full partition is not probed at all.)
              AND (NOT f_run OR NOT EXISTS (SELECT 1 FROM qt26_used_run u
                                            WHERE u.dag_run_id = ti.dag_run_id AND u.n >= u.cap))
              AND (NOT f_task OR NOT EXISTS (SELECT 1 FROM qt26_used_task u
                                             WHERE u.dag_id = ti.dag_id AND u.task_id = ti.task_id AND u.n >= u.cap))
              AND (NOT f_task_run OR NOT EXISTS (SELECT 1 FROM qt26_used_task_run u
                                                 WHERE u.dag_run_id = ti.dag_run_id AND u.task_id = ti.task_id
                                                   AND u.n >= u.cap))
              AND (NOT f_executor OR NOT EXISTS (SELECT 1 FROM qt26_used_executor u
                                                 WHERE u.executor = ti.executor AND u.n >= u.cap))
              -- (A reserving TI was served or holds its slots: R3.)
              AND (NOT v_has_res OR NOT EXISTS (SELECT 1 FROM pool_reservation x WHERE x.ti_id = ti.id))
            ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id
            LIMIT v_page;
            SET v_n = ROW_COUNT();
            -- (The first value an INSERT generated; unchanged by an INSERT of no row.)
            SET v_seq0 = IF(v_n > 0, LAST_INSERT_ID(), NULL), v_merged = FALSE;
            IF v_first THEN
                -- THE REFUSED HEAD: how many TIs lie past s ahead of the page's first row f (all
                -- refused by the page)? An index-only count, up to what an entry needs to be
                -- made (@engine_skip_min) or extended (1); that many or more: step 1' reads them
                -- again, with the refusals.
                SET f_id = NULL;
                IF v_seq0 IS NOT NULL THEN
                    SELECT g.priority_weight, g.run_after, g.map_index, g.id INTO f_pw, f_after, f_map, f_id
                    FROM qt26_page g WHERE g.seq = v_seq0;
                    SET v_done = FALSE;   -- (the handler for NOT FOUND ends the pool loop otherwise)
                END IF;
                SET v_lim = CASE WHEN b_id IS NULL THEN GREATEST(1, v_skip_min) ELSE 1 END;
                SELECT COUNT(*) INTO v_cnt
                FROM (SELECT 1 FROM task_instance ti FORCE INDEX (task_instance_queue_pool)
                      WHERE ti.state = 'scheduled' AND ti.pool = v_pool
                        AND (s_pw IS NULL
                             OR ti.priority_weight < s_pw
                             OR (ti.priority_weight = s_pw
                                 AND (ti.run_after > s_after
                                      OR (ti.run_after = s_after
                                          AND (ti.map_index > s_map OR (ti.map_index = s_map AND ti.id > s_id))))))
                        AND (f_id IS NULL
                             OR ti.priority_weight > f_pw
                             OR (ti.priority_weight = f_pw
                                 AND (ti.run_after < f_after
                                      OR (ti.run_after = f_after
                                          AND (ti.map_index < f_map OR (ti.map_index = f_map AND ti.id < f_id))))))
                      LIMIT v_lim) x;
                SET v_use_scan = v_cnt >= v_lim, v_reg = v_cnt >= v_lim;
                IF v_use_scan AND b_id IS NULL THEN
                    -- A NEW ENTRY'S GATE, BEFORE 1' READS ITS TIs (see above): no writer of the
                    -- pool is open from here on. (SKIP LOCKED: a writer holds it, no entry now.)
                    SELECT COUNT(*) INTO v_gate_held FROM queue_skip_gate g WHERE g.pool = v_pool
                    FOR UPDATE SKIP LOCKED;
                    IF v_gate_held = 0 THEN
                        SET v_use_scan = FALSE, v_reg = FALSE;
                    END IF;
                END IF;
            END IF;
            IF v_use_scan THEN
                -- 1'. THE REFUSED HEAD, READ AGAIN WITH THE REFUSALS (where the count above found
                --     enough TIs to make or extend the entry): the TIs past s ahead of f (one index
                --     range), grouped by the reason the page refused each (1-4 its run, task, (run,
                --     task) or executor is full, 5 it is wider than the pool's free slots, 0 neither:
                --     a reserving TI, R3), for step 1b; n, the last of them, is the bound an extended
                --     entry gets. (Making an entry reads its TIs twice, once: the page's read and
                --     this one.)
                IF v_reg_dirty THEN
                    DELETE FROM qt26_reg;
                END IF;
                SET v_reg_dirty = TRUE;
                INSERT INTO qt26_reg (why, dag_run_id, dag_id, task_id, executor, n, min_slots)
                SELECT w.why, CASE WHEN w.why IN (1, 3) THEN w.dag_run_id END,
                       CASE WHEN w.why = 2 THEN w.dag_id END, CASE WHEN w.why IN (2, 3) THEN w.task_id END,
                       CASE WHEN w.why = 4 THEN w.executor END, COUNT(*), MIN(w.pool_slots)
                FROM (
                    SELECT ti.pool_slots, ti.dag_run_id, ti.dag_id, ti.task_id, ti.executor,
                           CASE WHEN ur.dag_run_id IS NOT NULL THEN 1 WHEN ut.dag_id IS NOT NULL THEN 2
                                WHEN um.dag_run_id IS NOT NULL THEN 3 WHEN ue.executor IS NOT NULL THEN 4
                                WHEN v_free IS NOT NULL AND ti.pool_slots > v_free THEN 5
                                ELSE 0 END AS why
                    FROM task_instance ti FORCE INDEX (task_instance_queue_pool)
                    -- (Joins, not EXISTS: MariaDB 10.11 failed on correlated subqueries in such a
                    -- statement from its third execution in a procedure on.)
                    LEFT JOIN qt26_used_run ur ON ur.dag_run_id = ti.dag_run_id AND ur.n >= ur.cap
                    LEFT JOIN qt26_used_task ut ON ut.dag_id = ti.dag_id AND ut.task_id = ti.task_id AND ut.n >= ut.cap
                    LEFT JOIN qt26_used_task_run um ON um.dag_run_id = ti.dag_run_id AND um.task_id = ti.task_id
                                                   AND um.n >= um.cap
                    LEFT JOIN qt26_used_executor ue ON ue.executor = ti.executor AND ue.n >= ue.cap
                    WHERE ti.state = 'scheduled' AND ti.pool = v_pool
                      AND (s_pw IS NULL
                           OR ti.priority_weight < s_pw
                           OR (ti.priority_weight = s_pw
                               AND (ti.run_after > s_after
                                    OR (ti.run_after = s_after
                                        AND (ti.map_index > s_map OR (ti.map_index = s_map AND ti.id > s_id))))))
                      AND (f_id IS NULL
                           OR ti.priority_weight > f_pw
                           OR (ti.priority_weight = f_pw
                               AND (ti.run_after < f_after
                                    OR (ti.run_after = f_after
                                        AND (ti.map_index < f_map OR (ti.map_index = f_map AND ti.id < f_id))))))
                ) w
                GROUP BY w.why, CASE WHEN w.why IN (1, 3) THEN w.dag_run_id END,
                         CASE WHEN w.why = 2 THEN w.dag_id END, CASE WHEN w.why IN (2, 3) THEN w.task_id END,
                         CASE WHEN w.why = 4 THEN w.executor END;
                -- (A backward scan of the same range from f: its last TI.)
                SELECT ti.priority_weight, ti.run_after, ti.map_index, ti.id INTO n_pw, n_after, n_map, n_id
                FROM task_instance ti FORCE INDEX (task_instance_queue_pool)
                WHERE ti.state = 'scheduled' AND ti.pool = v_pool
                  AND (s_pw IS NULL
                       OR ti.priority_weight < s_pw
                       OR (ti.priority_weight = s_pw
                           AND (ti.run_after > s_after
                                OR (ti.run_after = s_after
                                    AND (ti.map_index > s_map OR (ti.map_index = s_map AND ti.id > s_id))))))
                  AND (f_id IS NULL
                       OR ti.priority_weight > f_pw
                       OR (ti.priority_weight = f_pw
                           AND (ti.run_after < f_after
                                OR (ti.run_after = f_after
                                    AND (ti.map_index < f_map OR (ti.map_index = f_map AND ti.id < f_id))))))
                ORDER BY ti.priority_weight, ti.run_after DESC, ti.map_index DESC, ti.id DESC
                LIMIT 1;
                SET v_done = FALSE;
            END IF;
            IF v_arr AND b_id IS NOT NULL THEN
                -- 1a. The logged TIs ahead of the entry's bound and past the keyset (the same
                --     skips), merged into the page, which keeps its first v_page rows.
                INSERT INTO qt26_page (id, pool, priority_weight, run_after, map_index, pool_slots,
                                       dag_run_id, dag_id, task_id, executor)
                SELECT DISTINCT ti.id, ti.pool, ti.priority_weight, ti.run_after, ti.map_index, ti.pool_slots,
                       ti.dag_run_id, ti.dag_id, ti.task_id, ti.executor
                FROM qt26_arr ti
                WHERE ti.ahead AND ti.pool = v_pool
                  AND (k_pw IS NULL
                       OR ti.priority_weight < k_pw
                       OR (ti.priority_weight = k_pw
                           AND (ti.run_after > k_after
                                OR (ti.run_after = k_after
                                    AND (ti.map_index > k_map OR (ti.map_index = k_map AND ti.id > k_id))))))
                  AND (v_free IS NULL OR ti.pool_slots <= v_free)
                  AND (NOT f_run OR NOT EXISTS (SELECT 1 FROM qt26_used_run u
                                                WHERE u.dag_run_id = ti.dag_run_id AND u.n >= u.cap))
                  AND (NOT f_task OR NOT EXISTS (SELECT 1 FROM qt26_used_task u
                                                 WHERE u.dag_id = ti.dag_id AND u.task_id = ti.task_id AND u.n >= u.cap))
                  AND (NOT f_task_run OR NOT EXISTS (SELECT 1 FROM qt26_used_task_run u
                                                     WHERE u.dag_run_id = ti.dag_run_id AND u.task_id = ti.task_id
                                                       AND u.n >= u.cap))
                  AND (NOT f_executor OR NOT EXISTS (SELECT 1 FROM qt26_used_executor u
                                                     WHERE u.executor = ti.executor AND u.n >= u.cap))
                  AND (NOT v_has_res OR NOT EXISTS (SELECT 1 FROM pool_reservation x WHERE x.ti_id = ti.id));
                IF ROW_COUNT() > 0 THEN
                    SET v_merged = TRUE;
                    SELECT COUNT(*) INTO v_n FROM qt26_page g WHERE g.pool = v_pool;
                    IF v_n > v_page THEN
                        SET v_off = v_page - 1;
                        SELECT g.priority_weight, g.run_after, g.map_index, g.id INTO l_pw, l_after, l_map, l_id
                        FROM qt26_page g WHERE g.pool = v_pool
                        ORDER BY g.priority_weight DESC, g.run_after, g.map_index, g.id
                        LIMIT 1 OFFSET v_off;
                        DELETE FROM qt26_page
                        WHERE pool = v_pool
                          AND (priority_weight < l_pw
                               OR (priority_weight = l_pw
                                   AND (run_after > l_after
                                        OR (run_after = l_after
                                            AND (map_index > l_map OR (map_index = l_map AND id > l_id))))));
                        SET v_n = v_page;
                    END IF;
                END IF;
            END IF;
            IF v_n = v_page THEN
                -- 2. A full page: candidates beyond its last row are unknown. (Its rows were
                --    written in queue order, the last one last, unless step 1a merged some.)
                IF v_merged THEN
                    SELECT g.priority_weight, g.run_after, g.map_index, g.id INTO l_pw, l_after, l_map, l_id
                    FROM qt26_page g WHERE g.pool = v_pool
                    ORDER BY g.priority_weight, g.run_after DESC, g.map_index DESC, g.id DESC
                    LIMIT 1;
                ELSE
                    SELECT g.priority_weight, g.run_after, g.map_index, g.id INTO l_pw, l_after, l_map, l_id
                    FROM qt26_page g WHERE g.seq >= v_seq0
                    ORDER BY g.seq DESC
                    LIMIT 1;
                END IF;
                IF c_pw IS NULL OR l_pw > c_pw
                   OR (l_pw = c_pw AND (l_after < c_after OR (l_after = c_after
                       AND (l_map < c_map OR (l_map = c_map AND l_id < c_id))))) THEN
                    SET c_pw = l_pw, c_after = l_after, c_map = l_map, c_id = l_id;
                END IF;
            END IF;
            IF v_first THEN
                -- 1b. MAKE OR EXTEND THE POOL'S SKIP ENTRY. What 1' found refused ahead of the page's
                --     first row, and the logged TIs ahead of the bound (each of them refused when the
                --     page's first row f lies past the bound; f at or ahead of it: the entry stays as
                --     it is). The entry is made or extended when there are some, every one has a
                --     reason of 1-5, it keeps at most 64 partitions, and a new entry covers at least
                --     @engine_skip_min TIs (32) and holds the pool's gate (stamp_scheduled_v1); its
                --     bound becomes n, the last TI 1' found refused (none: it stays).
                IF v_arr AND b_id IS NOT NULL THEN
                    SET f_id = NULL;
                    SELECT g.priority_weight, g.run_after, g.map_index, g.id INTO f_pw, f_after, f_map, f_id
                    FROM qt26_page g WHERE g.pool = v_pool
                    ORDER BY g.priority_weight DESC, g.run_after, g.map_index, g.id
                    LIMIT 1;
                    SET v_done = FALSE;   -- (NOT FOUND above only means an empty page)
                    IF f_id IS NULL
                       OR f_pw < b_pw OR (f_pw = b_pw AND (f_after > b_after OR (f_after = b_after
                           AND (f_map > b_map OR (f_map = b_map AND f_id > b_id))))) THEN
                        IF v_reg_dirty AND NOT v_use_scan THEN
                            DELETE FROM qt26_reg;   -- (another pool's)
                        END IF;
                        SET v_reg_dirty = TRUE;
                        INSERT INTO qt26_reg (why, dag_run_id, dag_id, task_id, executor, n, min_slots)
                        SELECT w.why, CASE WHEN w.why IN (1, 3) THEN w.dag_run_id END,
                               CASE WHEN w.why = 2 THEN w.dag_id END, CASE WHEN w.why IN (2, 3) THEN w.task_id END,
                               CASE WHEN w.why = 4 THEN w.executor END, COUNT(*), MIN(w.pool_slots)
                        FROM (
                            SELECT a.pool_slots, a.dag_run_id, a.dag_id, a.task_id, a.executor,
                                   CASE WHEN ur.dag_run_id IS NOT NULL THEN 1 WHEN ut.dag_id IS NOT NULL THEN 2
                                        WHEN um.dag_run_id IS NOT NULL THEN 3 WHEN ue.executor IS NOT NULL THEN 4
                                        WHEN v_free IS NOT NULL AND a.pool_slots > v_free THEN 5
                                        ELSE 0 END AS why
                            FROM (SELECT DISTINCT d.id, d.pool_slots, d.dag_run_id, d.dag_id, d.task_id, d.executor
                                  FROM qt26_arr d WHERE d.pool = v_pool AND d.ahead) a
                            LEFT JOIN qt26_used_run ur ON ur.dag_run_id = a.dag_run_id AND ur.n >= ur.cap
                            LEFT JOIN qt26_used_task ut ON ut.dag_id = a.dag_id AND ut.task_id = a.task_id AND ut.n >= ut.cap
                            LEFT JOIN qt26_used_task_run um ON um.dag_run_id = a.dag_run_id AND um.task_id = a.task_id
                                                           AND um.n >= um.cap
                            LEFT JOIN qt26_used_executor ue ON ue.executor = a.executor AND ue.n >= ue.cap
                        ) w
                        GROUP BY w.why, CASE WHEN w.why IN (1, 3) THEN w.dag_run_id END,
                                 CASE WHEN w.why = 2 THEN w.dag_id END, CASE WHEN w.why IN (2, 3) THEN w.task_id END,
                                 CASE WHEN w.why = 4 THEN w.executor END;
                        SET v_reg = v_reg OR ROW_COUNT() > 0;
                    ELSE
                        SET v_reg = FALSE;
                    END IF;
                END IF;
                IF v_reg THEN
                    -- (A partition may be in qt26_reg twice, from 1' and from the logged TIs.)
                    SELECT COALESCE(SUM(g.n), 0), COALESCE(MAX(g.why = 0), 0), MIN(CASE WHEN g.why = 5 THEN g.min_slots END)
                    INTO e_n, e_bad, e_min_wide
                    FROM qt26_reg g;
                    SELECT COUNT(*) INTO e_parts
                    FROM (SELECT DISTINCT g.why, g.dag_run_id, g.dag_id, g.task_id, g.executor FROM qt26_reg g
                          WHERE g.why BETWEEN 1 AND 4) x;
                    SELECT COUNT(*) INTO e_old FROM queue_skip_part q WHERE q.pool = v_pool;
                    SET v_gate = 0;
                    IF e_n > 0 AND e_bad = 0 AND e_old + e_parts <= 64 AND (b_id IS NOT NULL OR e_n >= v_skip_min) THEN
                        IF b_id IS NULL THEN
                            -- (A new entry: only with the gate taken before 1', above.)
                            SET v_gate = v_gate_held;
                        ELSE
                            SET v_gate = 1;
                        END IF;
                    END IF;
                    IF v_gate = 1 THEN
                        INSERT INTO queue_skip_part (pool, kind, dag_run_id, dag_id, task_id, executor)
                        SELECT DISTINCT v_pool, ELT(g.why, 'run', 'task', 'task_run', 'executor'), g.dag_run_id, g.dag_id,
                               g.task_id, g.executor
                        FROM qt26_reg g
                        WHERE g.why BETWEEN 1 AND 4
                          AND NOT EXISTS (SELECT 1 FROM queue_skip_part q
                                          WHERE q.pool = v_pool AND q.kind = ELT(g.why, 'run', 'task', 'task_run', 'executor')
                                            AND q.dag_run_id <=> g.dag_run_id AND q.dag_id <=> g.dag_id
                                            AND q.task_id <=> g.task_id AND q.executor <=> g.executor);
                        IF n_id IS NULL THEN
                            SET n_pw = b_pw, n_after = b_after, n_map = b_map, n_id = b_id;
                        END IF;
                        INSERT INTO queue_skip (pool, b_pw, b_after, b_map, b_id, min_wide)
                        VALUES (v_pool, n_pw, n_after, n_map, n_id, e_min_wide)
                        ON DUPLICATE KEY UPDATE b_pw = VALUES(b_pw), b_after = VALUES(b_after), b_map = VALUES(b_map),
                            b_id = VALUES(b_id),
                            min_wide = CASE WHEN min_wide IS NULL THEN VALUES(min_wide)
                                            WHEN VALUES(min_wide) IS NULL THEN min_wide
                                            ELSE LEAST(min_wide, VALUES(min_wide)) END;
                        INSERT INTO qt26_ext (pool) VALUES (v_pool);
                    END IF;
                END IF;
            END IF;
        END LOOP;
        CLOSE c_pools;
        IF v_first THEN
            SET v_first = FALSE;
            -- The log rows read in S0 that are no longer needed: their TI is not scheduled, lies
            -- past its entry's bound (or its pool has none: an entry made later reads it), or its
            -- entry was made or extended above (it covered the TI). The others stay, to be read
            -- again by the next call.
            -- (Led by the copy, STRAIGHT_JOIN: each row probed by primary key is committed. Led by
            -- queue_skip_log, as v24 let MariaDB plan it, the delete scans the log with locking
            -- reads and waits for every log row of a writer that has not committed.)
            IF v_log THEN
                DELETE l FROM qt26_arr a
                STRAIGHT_JOIN queue_skip_log l ON l.id = a.log_id
                LEFT JOIN qt26_ext e ON e.pool = a.pool
                WHERE NOT a.ahead OR e.pool IS NOT NULL;
            END IF;
        END IF;

        -- 2. Cut at the earliest last row of a full page.
        IF c_pw IS NULL THEN
            SET v_last = TRUE;   -- every open pool was read to its end
        ELSE
            SET k_pw = c_pw, k_after = c_after, k_map = c_map, k_id = c_id;
            DELETE FROM qt26_page
            WHERE priority_weight < k_pw
               OR (priority_weight = k_pw
                   AND (run_after > k_after
                        OR (run_after = k_after AND (map_index > k_map OR (map_index = k_map AND id > k_id)))));
        END IF;

        -- 3. Prune what greedy would refuse anyway; rank the rest in queue order.
        --    3a. The groups (GROUPS, v19: the page rows of one pool, run, task, width and
        --        executor) with room in every limit: their free capacity, read once a group, their
        --        partitions' numbers (dense from 1 over these groups) and a group number (gid).
        INSERT INTO qt26_grp
        SELECT ROW_NUMBER() OVER (), k.pool, k.dag_run_id, k.dag_id, k.task_id, k.pool_slots, k.executor,
               k.free_p, k.free_r, k.free_t, k.free_m, k.free_e, k.runs_now,
               DENSE_RANK() OVER (ORDER BY k.pool), DENSE_RANK() OVER (ORDER BY k.dag_id, k.task_id),
               DENSE_RANK() OVER (ORDER BY k.dag_run_id, k.task_id), DENSE_RANK() OVER (ORDER BY k.executor)
        FROM (
                SELECT q.pool, q.dag_run_id, q.dag_id, q.task_id, q.pool_slots, q.executor,
                       CASE WHEN p.slots >= 0 THEN p.slots - COALESCE(up.n, 0) END AS free_p,
                       CASE WHEN ur.dag_run_id IS NOT NULL THEN ur.cap - ur.n
                            ELSE d.max_active_tasks - COALESCE(cr.n, 0) END AS free_r,
                       CASE WHEN ut.dag_id IS NOT NULL THEN ut.cap - ut.n
                            ELSE t.max_active_tis_per_dag - COALESCE(ct.n, 0) END AS free_t,
                       CASE WHEN um.dag_run_id IS NOT NULL THEN um.cap - um.n
                            ELSE t.max_active_tis_per_dagrun - COALESCE(cm.n, 0) END AS free_m,
                       CASE WHEN ue.executor IS NOT NULL THEN ue.cap - ue.n
                            ELSE ex.parallelism - COALESCE(ce.n, 0) END AS free_e,
                       (NOT d.is_paused AND NOT d.is_draining AND NOT v_drain_all) AS runs_now
                FROM (SELECT DISTINCT h.pool, h.dag_run_id, h.dag_id, h.task_id, h.pool_slots, h.executor
                      FROM qt26_page h) q
                JOIN dag_run r ON r.id = q.dag_run_id AND r.state = 'running'
                JOIN dag d ON d.dag_id = q.dag_id AND d.is_active
                JOIN task t ON t.dag_id = q.dag_id AND t.task_id = q.task_id AND t.is_active
                JOIN executor ex ON ex.name = q.executor
                JOIN pool p ON p.name = q.pool
                LEFT JOIN qt26_used_pool up ON up.pool = q.pool
                LEFT JOIN qt26_used_run ur ON ur.dag_run_id = q.dag_run_id
                LEFT JOIN qt26_used_task ut ON ut.dag_id = q.dag_id AND ut.task_id = q.task_id
                LEFT JOIN qt26_used_task_run um ON um.dag_run_id = q.dag_run_id AND um.task_id = q.task_id
                LEFT JOIN qt26_used_executor ue ON ue.executor = q.executor
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
        SET v_groups = GREATEST(v_groups, ROW_COUNT());
        --    3b. The candidates: the page rows of those groups, each within the first N of its
        --        group (a row with N members of its group ahead of it is refused: GROUPS, v19),
        --        numbered in queue order. (MySQL's LEAST is NULL when an argument is: an
        --        unlimited kind counts as v_left.)
        INSERT INTO qt26_cand (pos, id, pool_slots, dag_run_id, gid,
                                       pk, tk, mk, ek, free_p, free_r, free_t, free_m, free_e, status)
        SELECT ROW_NUMBER() OVER (ORDER BY z.priority_weight DESC, z.run_after, z.map_index, z.id),
               z.id, z.pool_slots, z.dag_run_id, z.gid,
               z.pk, z.tk, z.mk, z.ek, z.free_p, z.free_r, z.free_t, z.free_m, z.free_e, 'u'
        FROM (
            SELECT g.id, g.pool, g.priority_weight, g.run_after, g.map_index, g.pool_slots, g.dag_run_id,
                   g.dag_id, g.task_id, g.executor, k.gid, k.pk, k.tk, k.mk, k.ek,
                   k.free_p, k.free_r, k.free_t, k.free_m, k.free_e, k.runs_now,
                   ROW_NUMBER() OVER (PARTITION BY k.gid
                                      ORDER BY g.priority_weight DESC, g.run_after, g.map_index, g.id) AS grn
            FROM qt26_page g
            JOIN qt26_grp k ON k.dag_run_id = g.dag_run_id AND k.task_id = g.task_id AND k.pool = g.pool
               AND k.pool_slots = g.pool_slots AND k.executor = g.executor
        ) z
        WHERE (NOT z.runs_now OR z.grn <= LEAST(v_left, COALESCE(z.free_p DIV z.pool_slots, v_left),
                                                COALESCE(z.free_r, v_left), COALESCE(z.free_t, v_left),
                                                COALESCE(z.free_m, v_left), COALESCE(z.free_e, v_left)))
          AND (z.runs_now OR EXISTS (SELECT 1 FROM task_instance x WHERE x.id = z.id AND x.next_method IS NOT NULL));
        DELETE FROM qt26_page;

        -- 4. Passes until the first v_left accepted are known (max_tis aside, see below).
        passes: LOOP
            -- Accept: the running demand of everything not rejected fits every limit.
            DELETE FROM qt26_verdict;
            INSERT INTO qt26_verdict (pos)
            SELECT w.pos FROM (
                SELECT c.pos, c.status, c.free_p, c.free_r, c.free_t, c.free_m, c.free_e,
                       SUM(c.pool_slots) OVER wp AS p_sum, COUNT(*) OVER wr AS r_sum, COUNT(*) OVER wt AS t_sum,
                       COUNT(*) OVER wm AS m_sum, COUNT(*) OVER we AS e_sum
                FROM qt26_cand c
                WHERE c.status <> 'r'   -- a rejected candidate uses nothing
                WINDOW wp AS (PARTITION BY c.pk ORDER BY c.pos), wr AS (PARTITION BY c.dag_run_id ORDER BY c.pos),
                       wt AS (PARTITION BY c.tk ORDER BY c.pos), wm AS (PARTITION BY c.mk ORDER BY c.pos),
                       we AS (PARTITION BY c.ek ORDER BY c.pos)
            ) w
            WHERE w.status = 'u'
              AND (w.free_p IS NULL OR w.p_sum <= w.free_p) AND (w.free_r IS NULL OR w.r_sum <= w.free_r)
              AND (w.free_t IS NULL OR w.t_sum <= w.free_t) AND (w.free_m IS NULL OR w.m_sum <= w.free_m)
              AND (w.free_e IS NULL OR w.e_sum <= w.free_e);
            UPDATE qt26_cand c JOIN qt26_verdict v ON v.pos = c.pos SET c.status = 'a';

            -- Reject: what is accepted ahead (including just now) plus its own demand does not fit.
            DELETE FROM qt26_verdict;
            INSERT INTO qt26_verdict (pos)
            SELECT w.pos FROM (
                SELECT c.pos, c.status, c.pool_slots, c.free_p, c.free_r, c.free_t, c.free_m, c.free_e,
                       SUM(CASE WHEN c.status = 'a' THEN c.pool_slots ELSE 0 END) OVER wp AS p_acc,
                       SUM(CASE WHEN c.status = 'a' THEN 1 ELSE 0 END) OVER wr AS r_acc,
                       SUM(CASE WHEN c.status = 'a' THEN 1 ELSE 0 END) OVER wt AS t_acc,
                       SUM(CASE WHEN c.status = 'a' THEN 1 ELSE 0 END) OVER wm AS m_acc,
                       SUM(CASE WHEN c.status = 'a' THEN 1 ELSE 0 END) OVER we AS e_acc
                FROM qt26_cand c
                WHERE c.status <> 'r'
                WINDOW wp AS (PARTITION BY c.pk ORDER BY c.pos), wr AS (PARTITION BY c.dag_run_id ORDER BY c.pos),
                       wt AS (PARTITION BY c.tk ORDER BY c.pos), wm AS (PARTITION BY c.mk ORDER BY c.pos),
                       we AS (PARTITION BY c.ek ORDER BY c.pos)
            ) w
            WHERE w.status = 'u'
              AND (w.p_acc + w.pool_slots > w.free_p OR w.r_acc + 1 > w.free_r OR w.t_acc + 1 > w.free_t
                   OR w.m_acc + 1 > w.free_m OR w.e_acc + 1 > w.free_e);
            UPDATE qt26_cand c JOIN qt26_verdict v ON v.pos = c.pos SET c.status = 'r';

            -- Done when everything ahead of the first undecided candidate is decided and holds
            -- v_left accepted: what comes after cannot be among the first v_left.
            SELECT MIN(c.pos) INTO v_first_open FROM qt26_cand c WHERE c.status = 'u';
            IF v_first_open IS NULL THEN
                LEAVE passes;
            END IF;
            SELECT COUNT(*) INTO v_n FROM qt26_cand c WHERE c.status = 'a' AND c.pos < v_first_open;
            IF v_n >= v_left THEN
                LEAVE passes;
            END IF;
        END LOOP;

        -- max_tis: greedy with a limit of n takes the first n of what greedy without it takes,
        -- so the passes ignore it; only the first v_left accepted are kept.
        SELECT MAX(x.pos) INTO v_cut
        FROM (SELECT c.pos FROM qt26_cand c WHERE c.status = 'a' ORDER BY c.pos LIMIT v_left) x;
        UPDATE qt26_cand c SET c.status = 'x' WHERE c.status = 'a' AND c.pos > v_cut;

        -- 5. Charge what this batch took to the used counts, one kind of limit per statement.
        INSERT INTO qt26_used_pool (pool, n)
        SELECT k.pool, SUM(c.pool_slots) FROM qt26_cand c JOIN qt26_grp k ON k.gid = c.gid
        WHERE c.status = 'a' GROUP BY k.pool
        ON DUPLICATE KEY UPDATE n = n + VALUES(n);
        INSERT INTO qt26_used_run (dag_run_id, n, cap)
        SELECT c.dag_run_id, COUNT(*), MIN(c.free_r) FROM qt26_cand c
        WHERE c.status = 'a' AND c.free_r IS NOT NULL GROUP BY c.dag_run_id
        ON DUPLICATE KEY UPDATE n = n + VALUES(n);
        INSERT INTO qt26_used_task (dag_id, task_id, n, cap)
        SELECT k.dag_id, k.task_id, COUNT(*), MIN(c.free_t) FROM qt26_cand c JOIN qt26_grp k ON k.gid = c.gid
        WHERE c.status = 'a' AND c.free_t IS NOT NULL GROUP BY k.dag_id, k.task_id
        ON DUPLICATE KEY UPDATE n = n + VALUES(n);
        INSERT INTO qt26_used_task_run (dag_run_id, task_id, n, cap)
        SELECT k.dag_run_id, k.task_id, COUNT(*), MIN(c.free_m) FROM qt26_cand c JOIN qt26_grp k ON k.gid = c.gid
        WHERE c.status = 'a' AND c.free_m IS NOT NULL GROUP BY k.dag_run_id, k.task_id
        ON DUPLICATE KEY UPDATE n = n + VALUES(n);
        INSERT INTO qt26_used_executor (executor, n, cap)
        SELECT k.executor, COUNT(*), MIN(c.free_e) FROM qt26_cand c JOIN qt26_grp k ON k.gid = c.gid
        WHERE c.status = 'a' AND c.free_e IS NOT NULL GROUP BY k.executor
        ON DUPLICATE KEY UPDATE n = n + VALUES(n);

        INSERT INTO qt26_accepted (id) SELECT c.id FROM qt26_cand c WHERE c.status = 'a';
        SET v_left = v_left - ROW_COUNT();
        DELETE FROM qt26_cand;
        DELETE FROM qt26_grp;
        -- Another batch means pruning or rejections ate this one: read deeper next time.
        SET v_factor = LEAST(v_factor * 2, 256);
    END WHILE;

    -- The compare-and-set of the accepted TIs, its usage appended by the statement after it, not
    -- by the row trigger (see above; the trigger passes over exactly the rows this UPDATE writes).
    BEGIN
        DECLARE EXIT HANDLER FOR SQLEXCEPTION
        BEGIN
            SET @engine_usage_queued_at = NULL, @engine_usage_queued_by = NULL;
            RESIGNAL;
        END;
        SET @engine_usage_queued_at = v_now, @engine_usage_queued_by = p_job_id;
        UPDATE qt26_accepted a
        STRAIGHT_JOIN task_instance ti ON a.id = ti.id
        SET ti.state = 'queued', ti.queued_at = v_now, ti.queued_by_job_id = p_job_id, ti.updated_at = v_now
        WHERE ti.state = 'scheduled';
        SET @engine_usage_queued_at = NULL, @engine_usage_queued_by = NULL;
    END;
    -- The TIs it moved: queued, stamped now by this job (rows it did not move were not
    -- scheduled, so not stamped so: the lock keeps other queue_tis calls out).
    -- (STRAIGHT_JOIN, here and in the result below: led by task_instance, the optimizer would read
    -- every queued TI through the queue index, and its estimate of them can be 1.)
    INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
    SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor, COUNT(*), SUM(ti.pool_slots)
    FROM qt26_accepted a
    STRAIGHT_JOIN task_instance ti ON ti.id = a.id
    WHERE ti.state = 'queued' AND ti.queued_at = v_now AND ti.queued_by_job_id <=> p_job_id
    GROUP BY ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor;

    IF v_has_res THEN
        -- (Led by the accepted ids, as the final UPDATE: no scan of pool_reservation with locking
        -- reads, which would wait for a reservation another transaction changed.)
        DELETE x FROM qt26_accepted a STRAIGHT_JOIN pool_reservation x ON x.ti_id = a.id;   -- R4. served
    END IF;
    -- (A batch of more than 10,000 groups: their memory is returned; MEMORY, AND WHAT IT HOLDS.)
    IF v_groups > 10000 THEN
        DROP TEMPORARY TABLE qt26_grp;
    END IF;

    -- The accepted TIs that the compare-and-set above moved (they are queued, stamped now by us).
    SELECT ti.id AS ti_id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, ti.pool, ti.queue,
           ti.executor, ti.priority_weight
    FROM qt26_accepted a
    STRAIGHT_JOIN task_instance ti ON ti.id = a.id
    WHERE ti.state = 'queued' AND ti.queued_at = v_now AND ti.queued_by_job_id <=> p_job_id
    ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id;
END
