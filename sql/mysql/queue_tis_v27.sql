-- queue_tis_v27(max_tis, job_id, now, page_factor): on MySQL/MariaDB, the critical section.
-- With aging off (@engine_aging_rate or @engine_aging_cap not above 0: the default) it calls
-- queue_tis_v26 (read sql/mysql/queue_tis_v26.sql). With aging on, v26 (as v24) handed the call to
-- queue_tis_v9, whose fold is fold_usage_v1: its delete of the folded rows could be planned as a
-- locking scan of usage_delta that waits, under the queue lock, for every delta row of a
-- transaction still open (sql/mysql/fold_usage_v2.sql says when). So with aging on this runs
-- v9's text (read sql/mysql/queue_tis_v9.sql for its steps and contract) with two changes:
--   * the fold is fold_usage_v2 (its deletes led by its copy: it waits for no writer);
--   * the served reservations' delete is led by the accepted ids (STRAIGHT_JOIN), as the final
--     UPDATE already was.
-- Scratch tables qt27_* (v9 and v27 may run in one session); messages name v27. v9 has no skip
-- entries, so no log to delete.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: v26's with aging off; v9's with aging on (the row
-- scheduler_lock('queue_tis'), FOR UPDATE SKIP LOCKED: error 3572 ER_LOCK_NOWAIT at once when
-- another scheduler holds it; no limit is exceeded; a TI is queued once; slots a reservation
-- holds go to its TI only); and on both paths no delete of a shared table waits for a writer.
-- Both dialects name the same procedures, and the named query `queue_tis` calls v27 on both
-- (PostgreSQL's v27 calls its v25, as its v26 did).
CREATE PROCEDURE queue_tis_v27(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
proc: BEGIN
    DECLARE v_now        DATETIME(6);
    DECLARE v_left       INT;            -- how many more this call may queue
    DECLARE v_page_max   INT;
    DECLARE v_last       BOOLEAN DEFAULT FALSE;  -- the current batch reaches the end of every pool
    DECLARE v_n          INT;
    DECLARE v_first_open INT;            -- position of the first undecided candidate of the batch
    DECLARE v_cut        INT;
    DECLARE v_factor     INT;            -- page rows per free slot; doubles batch after batch
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
    DECLARE c_pools CURSOR FOR
        SELECT p.name, CASE WHEN p.slots < 0 THEN LEAST(v_page_max, (v_factor * v_left + 1) DIV 2 + 8)
                            ELSE LEAST(v_page_max, (v_factor * LEAST(p.slots - COALESCE(u.n, 0), v_left) + 1) DIV 2 + 8)
                       END,
               CASE WHEN p.slots >= 0 THEN p.slots - COALESCE(u.n, 0) END
        FROM pool p
        LEFT JOIN qt27_used_pool u ON u.pool = p.name
        WHERE p.slots < 0 OR p.slots - COALESCE(u.n, 0) >= 1   -- an unknown pool has no row: never read
        ORDER BY p.name;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    -- WITH AGING OFF: queue_tis_v26, which reads and clears the knobs itself. (The test is v26's
    -- own, on the same user variables: v26 hands an aging call to v9, never back here.)
    IF NOT (v_aging_rate > 0 AND v_aging_cap > 0) THEN
        CALL queue_tis_v26(p_max_tis, p_job_id, p_now, p_page_factor);
        LEAVE proc;
    END IF;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET v_left = p_max_tis;
    SET v_page_max = GREATEST(64, LEAST(p_max_tis * 4, 10000));
    SET v_factor = COALESCE(p_page_factor, 2);
    SET v_aging = v_aging_rate > 0 AND v_aging_cap > 0;
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
    SET @qt27_isolation = NULL;
    BEGIN
        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;  -- a variable the server lacks: the other one
        PREPARE qt27_iso FROM 'SELECT @@tx_isolation INTO @qt27_isolation';
        EXECUTE qt27_iso;
        DEALLOCATE PREPARE qt27_iso;
    END;
    IF @qt27_isolation IS NULL THEN
        BEGIN
            DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
            PREPARE qt27_iso FROM 'SELECT @@transaction_isolation INTO @qt27_isolation';
            EXECUTE qt27_iso;
            DEALLOCATE PREPARE qt27_iso;
        END;
    END IF;
    SET v_isolation = @qt27_isolation;
    IF v_isolation IS NOT NULL AND v_isolation <> 'READ-COMMITTED' THEN
        SET v_isolation = CONCAT('queue_tis_v27 needs READ COMMITTED isolation, not ', v_isolation);
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
            MESSAGE_TEXT = 'queue_tis_v27 is busy: another scheduler holds scheduler_lock queue_tis';
    END IF;

    -- The usage counters take in what changed since the last call (under this call's lock).
    CALL fold_usage_v2(v_n);

    -- Session-local scratch tables, created once per connection, emptied here.
    -- (Not v4's tables: a session may call both.)
    CREATE TEMPORARY TABLE IF NOT EXISTS qt27_used_pool (pool VARCHAR(250) PRIMARY KEY, n INT);
    -- (cap: the partition's limit; n >= cap means full, and the page skips its TIs.)
    CREATE TEMPORARY TABLE IF NOT EXISTS qt27_used_run (dag_run_id BIGINT PRIMARY KEY, n INT, cap INT);
    CREATE TEMPORARY TABLE IF NOT EXISTS qt27_used_task (
        dag_id VARCHAR(250), task_id VARCHAR(250), n INT, cap INT, PRIMARY KEY (dag_id, task_id));
    CREATE TEMPORARY TABLE IF NOT EXISTS qt27_used_task_run (
        dag_run_id BIGINT, task_id VARCHAR(250), n INT, cap INT, PRIMARY KEY (dag_run_id, task_id));
    CREATE TEMPORARY TABLE IF NOT EXISTS qt27_used_executor (executor VARCHAR(250) PRIMARY KEY, n INT, cap INT);
    CREATE TEMPORARY TABLE IF NOT EXISTS qt27_page (
        id BIGINT PRIMARY KEY, pool VARCHAR(250), priority_weight INT, run_after DATETIME(6), map_index INT,
        pool_slots INT, dag_run_id BIGINT, dag_id VARCHAR(250), task_id VARCHAR(250), executor VARCHAR(250));
    -- pk, tk, mk, ek number the pool, task, (run, task) and executor partitions of a batch:
    -- the window passes sort on small integers instead of names.
    CREATE TEMPORARY TABLE IF NOT EXISTS qt27_cand (
        pos INT PRIMARY KEY, id BIGINT, pool VARCHAR(250), pool_slots INT, dag_run_id BIGINT,
        dag_id VARCHAR(250), task_id VARCHAR(250), executor VARCHAR(250),
        pk INT, tk INT, mk INT, ek INT, free_p INT, free_r INT, free_t INT, free_m INT, free_e INT,
        status CHAR(1));
    CREATE TEMPORARY TABLE IF NOT EXISTS qt27_verdict (pos INT PRIMARY KEY);
    CREATE TEMPORARY TABLE IF NOT EXISTS qt27_accepted (id BIGINT PRIMARY KEY);
    DELETE FROM qt27_used_pool;
    DELETE FROM qt27_used_run;
    DELETE FROM qt27_used_task;
    DELETE FROM qt27_used_task_run;
    DELETE FROM qt27_used_executor;
    DELETE FROM qt27_page;
    DELETE FROM qt27_cand;
    DELETE FROM qt27_verdict;
    DELETE FROM qt27_accepted;

    SELECT COALESCE(MAX(dp.is_draining), FALSE) INTO v_drain_all FROM deployment dp;

    -- 0. What each limited partition uses, from the usage counters (v4 summed the active TIs
    --    here). The counters count as limit_usage counts (a deferred TI holds its place only in a
    --    pool with include_deferred, and then in every limit), hold a row per partition in use
    --    (none: 0) and, after the fold above, equal the recount of every transaction committed
    --    before it (usage_drift; docs/critical-section.md, "Usage counters"). Only partitions
    --    with a limit are copied, with the limit read now (not the counter's cap hint). A run's
    --    DAG is read from dag_run, not from the counter's dag_id column: that column is the one
    --    of the counter's first fold, and a fold whose deltas of one run id sum to 0 keeps the row
    --    as it was (only where run ids are reused, as the property tests' worlds do).
    INSERT INTO qt27_used_pool (pool, n) SELECT u.pool, u.slots FROM used_pool u;
    INSERT INTO qt27_used_run (dag_run_id, n, cap)
    SELECT u.dag_run_id, u.n, d.max_active_tasks
    FROM used_run u
    JOIN dag_run r ON r.id = u.dag_run_id
    JOIN dag d ON d.dag_id = r.dag_id AND d.max_active_tasks IS NOT NULL;
    INSERT INTO qt27_used_task (dag_id, task_id, n, cap)
    SELECT u.dag_id, u.task_id, u.n, t.max_active_tis_per_dag
    FROM used_task u JOIN task t ON t.dag_id = u.dag_id AND t.task_id = u.task_id AND t.max_active_tis_per_dag IS NOT NULL;
    INSERT INTO qt27_used_task_run (dag_run_id, task_id, n, cap)
    SELECT u.dag_run_id, u.task_id, u.n, t.max_active_tis_per_dagrun
    FROM used_task_run u
    JOIN dag_run r ON r.id = u.dag_run_id
    JOIN task t ON t.dag_id = r.dag_id AND t.task_id = u.task_id AND t.max_active_tis_per_dagrun IS NOT NULL;
    INSERT INTO qt27_used_executor (executor, n, cap)
    SELECT u.executor, u.n, e.parallelism
    FROM used_executor u JOIN executor e ON e.name = u.executor AND e.parallelism IS NOT NULL;

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
                                      ORDER BY CASE WHEN v_aging THEN LEAST(2147483647, ti.priority_weight + LEAST(v_aging_cap, FLOOR(v_aging_rate
                       * GREATEST(0, TIMESTAMPDIFF(MICROSECOND, COALESCE(ti.updated_at, ti.run_after), v_now) / 1000000) / 60))) ELSE ti.priority_weight END DESC,
                                               ti.run_after, ti.map_index, ti.id) AS rn
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
        DECLARE u_r INT;
        DECLARE u_t INT;
        DECLARE u_m INT;
        DECLARE u_e INT;
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
            SELECT COALESCE(MAX(u.n), 0) INTO u_p FROM qt27_used_pool u WHERE u.pool = r_pool;
            SELECT COALESCE(MAX(u.n), 0) INTO u_r FROM qt27_used_run u WHERE u.dag_run_id = r_run;
            SELECT COALESCE(MAX(u.n), 0) INTO u_t FROM qt27_used_task u
            WHERE u.dag_id = r_dag AND u.task_id = r_task;
            SELECT COALESCE(MAX(u.n), 0) INTO u_m FROM qt27_used_task_run u
            WHERE u.dag_run_id = r_run AND u.task_id = r_task;
            SELECT COALESCE(MAX(u.n), 0) INTO u_e FROM qt27_used_executor u WHERE u.executor = r_ex;
            IF r_cap_p - u_p >= r_ps AND (r_cap_r IS NULL OR r_cap_r > u_r) AND (r_cap_t IS NULL OR r_cap_t > u_t)
               AND (r_cap_m IS NULL OR r_cap_m > u_m) AND (r_cap_e IS NULL OR r_cap_e > u_e) THEN
                INSERT INTO qt27_accepted (id) VALUES (r_ti);
                SET v_left = v_left - 1;
                INSERT INTO qt27_used_pool (pool, n) VALUES (r_pool, r_ps) ON DUPLICATE KEY UPDATE n = n + r_ps;
                IF r_cap_r IS NOT NULL THEN
                    INSERT INTO qt27_used_run (dag_run_id, n, cap) VALUES (r_run, 1, r_cap_r)
                    ON DUPLICATE KEY UPDATE n = n + 1;
                END IF;
                IF r_cap_t IS NOT NULL THEN
                    INSERT INTO qt27_used_task (dag_id, task_id, n, cap) VALUES (r_dag, r_task, 1, r_cap_t)
                    ON DUPLICATE KEY UPDATE n = n + 1;
                END IF;
                IF r_cap_m IS NOT NULL THEN
                    INSERT INTO qt27_used_task_run (dag_run_id, task_id, n, cap) VALUES (r_run, r_task, 1, r_cap_m)
                    ON DUPLICATE KEY UPDATE n = n + 1;
                END IF;
                IF r_cap_e IS NOT NULL THEN
                    INSERT INTO qt27_used_executor (executor, n, cap) VALUES (r_ex, 1, r_cap_e)
                    ON DUPLICATE KEY UPDATE n = n + 1;
                END IF;
            ELSEIF r_cap_p - u_p > 0 THEN
                INSERT INTO qt27_used_pool (pool, n) VALUES (r_pool, LEAST(r_slots, r_cap_p - u_p))
                ON DUPLICATE KEY UPDATE n = n + LEAST(r_slots, r_cap_p - u_p);
            END IF;
        END LOOP;
        CLOSE c_res;
    END;

    batches: WHILE v_left > 0 AND NOT v_last DO
        -- Which kinds of limit have a full partition now (the page probes only those).
        SELECT EXISTS (SELECT 1 FROM qt27_used_run u WHERE u.n >= u.cap),
               EXISTS (SELECT 1 FROM qt27_used_task u WHERE u.n >= u.cap),
               EXISTS (SELECT 1 FROM qt27_used_task_run u WHERE u.n >= u.cap),
               EXISTS (SELECT 1 FROM qt27_used_executor u WHERE u.n >= u.cap)
        INTO f_run, f_task, f_task_run, f_executor;

        -- 1. A page per pool with room.
        SET c_pw = NULL, c_after = NULL, c_map = NULL, c_id = NULL;
        SET v_done = FALSE;
        OPEN c_pools;
        pools: LOOP
            FETCH c_pools INTO v_pool, v_page, v_free;
            IF v_done THEN
                LEAVE pools;
            END IF;
            IF NOT v_aging THEN
                INSERT INTO qt27_page (id, pool, priority_weight, run_after, map_index, pool_slots,
                                               dag_run_id, dag_id, task_id, executor)
                SELECT ti.id, ti.pool, ti.priority_weight, ti.run_after, ti.map_index, ti.pool_slots,
                       ti.dag_run_id, ti.dag_id, ti.task_id, ti.executor
                FROM task_instance ti
                WHERE ti.state = 'scheduled' AND ti.pool = v_pool
                  AND (k_pw IS NULL
                       OR ti.priority_weight < k_pw
                       OR (ti.priority_weight = k_pw
                           AND (ti.run_after > k_after
                                OR (ti.run_after = k_after
                                    AND (ti.map_index > k_map OR (ti.map_index = k_map AND ti.id > k_id))))))
                  -- Skip what greedy refuses anyway, before it takes a row of the page: wider than the
                  -- pool's free slots, or in a run, task, (run, task) or executor already full.
                  AND (v_free IS NULL OR ti.pool_slots <= v_free)
                  -- (A kind with no full partition is not probed at all.)
                  AND (NOT f_run OR NOT EXISTS (SELECT 1 FROM qt27_used_run u
                                                WHERE u.dag_run_id = ti.dag_run_id AND u.n >= u.cap))
                  AND (NOT f_task OR NOT EXISTS (SELECT 1 FROM qt27_used_task u
                                                 WHERE u.dag_id = ti.dag_id AND u.task_id = ti.task_id AND u.n >= u.cap))
                  AND (NOT f_task_run OR NOT EXISTS (SELECT 1 FROM qt27_used_task_run u
                                                     WHERE u.dag_run_id = ti.dag_run_id AND u.task_id = ti.task_id
                                                       AND u.n >= u.cap))
                  AND (NOT f_executor OR NOT EXISTS (SELECT 1 FROM qt27_used_executor u
                                                     WHERE u.executor = ti.executor AND u.n >= u.cap))
                  -- (A reserving TI was served or holds its slots: R3.)
                  AND (NOT v_has_res OR NOT EXISTS (SELECT 1 FROM pool_reservation x WHERE x.ti_id = ti.id))
                ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id
                LIMIT v_page;
                SET v_n = ROW_COUNT();
            ELSE
                -- (With aging: the order of the effective priority, stored as the page's priority_weight.)
                INSERT INTO qt27_page (id, pool, priority_weight, run_after, map_index, pool_slots,
                                               dag_run_id, dag_id, task_id, executor)
                SELECT ti.id, ti.pool, ti.eff, ti.run_after, ti.map_index, ti.pool_slots,
                       ti.dag_run_id, ti.dag_id, ti.task_id, ti.executor
                FROM (SELECT ti.*, LEAST(2147483647, ti.priority_weight + LEAST(v_aging_cap, FLOOR(v_aging_rate
                                  * GREATEST(0, TIMESTAMPDIFF(MICROSECOND, COALESCE(ti.updated_at, ti.run_after), v_now) / 1000000) / 60))) AS eff
                      FROM task_instance ti WHERE ti.state = 'scheduled' AND ti.pool = v_pool) ti
                WHERE (k_pw IS NULL
                       OR ti.eff < k_pw
                       OR (ti.eff = k_pw
                           AND (ti.run_after > k_after
                                OR (ti.run_after = k_after
                                    AND (ti.map_index > k_map OR (ti.map_index = k_map AND ti.id > k_id))))))
                  -- Skip what greedy refuses anyway, before it takes a row of the page: wider than the
                  -- pool's free slots, or in a run, task, (run, task) or executor already full.
                  AND (v_free IS NULL OR ti.pool_slots <= v_free)
                  -- (A kind with no full partition is not probed at all.)
                  AND (NOT f_run OR NOT EXISTS (SELECT 1 FROM qt27_used_run u
                                                WHERE u.dag_run_id = ti.dag_run_id AND u.n >= u.cap))
                  AND (NOT f_task OR NOT EXISTS (SELECT 1 FROM qt27_used_task u
                                                 WHERE u.dag_id = ti.dag_id AND u.task_id = ti.task_id AND u.n >= u.cap))
                  AND (NOT f_task_run OR NOT EXISTS (SELECT 1 FROM qt27_used_task_run u
                                                     WHERE u.dag_run_id = ti.dag_run_id AND u.task_id = ti.task_id
                                                       AND u.n >= u.cap))
                  AND (NOT f_executor OR NOT EXISTS (SELECT 1 FROM qt27_used_executor u
                                                     WHERE u.executor = ti.executor AND u.n >= u.cap))
                  -- (A reserving TI was served or holds its slots: R3.)
                  AND (NOT v_has_res OR NOT EXISTS (SELECT 1 FROM pool_reservation x WHERE x.ti_id = ti.id))
                ORDER BY ti.eff DESC, ti.run_after, ti.map_index, ti.id
                LIMIT v_page;
                SET v_n = ROW_COUNT();
            END IF;
            IF v_n = v_page THEN
                -- 2. A full page: candidates beyond its last row are unknown.
                SELECT g.priority_weight, g.run_after, g.map_index, g.id INTO l_pw, l_after, l_map, l_id
                FROM qt27_page g WHERE g.pool = v_pool
                ORDER BY g.priority_weight, g.run_after DESC, g.map_index DESC, g.id DESC
                LIMIT 1;
                IF c_pw IS NULL OR l_pw > c_pw
                   OR (l_pw = c_pw AND (l_after < c_after OR (l_after = c_after
                       AND (l_map < c_map OR (l_map = c_map AND l_id < c_id))))) THEN
                    SET c_pw = l_pw, c_after = l_after, c_map = l_map, c_id = l_id;
                END IF;
            END IF;
        END LOOP;
        CLOSE c_pools;

        -- 2. Cut at the earliest last row of a full page.
        IF c_pw IS NULL THEN
            SET v_last = TRUE;   -- every open pool was read to its end
        ELSE
            SET k_pw = c_pw, k_after = c_after, k_map = c_map, k_id = c_id;
            DELETE FROM qt27_page
            WHERE priority_weight < k_pw
               OR (priority_weight = k_pw
                   AND (run_after > k_after
                        OR (run_after = k_after AND (map_index > k_map OR (map_index = k_map AND id > k_id)))));
        END IF;

        -- 3. Prune what greedy would refuse anyway; rank the rest in queue order.
        INSERT INTO qt27_cand (pos, id, pool, pool_slots, dag_run_id, dag_id, task_id, executor,
                                       pk, tk, mk, ek, free_p, free_r, free_t, free_m, free_e, status)
        SELECT ROW_NUMBER() OVER (ORDER BY z.priority_weight DESC, z.run_after, z.map_index, z.id),
               z.id, z.pool, z.pool_slots, z.dag_run_id, z.dag_id, z.task_id, z.executor,
               DENSE_RANK() OVER (ORDER BY z.pool), DENSE_RANK() OVER (ORDER BY z.dag_id, z.task_id),
               DENSE_RANK() OVER (ORDER BY z.dag_run_id, z.task_id), DENSE_RANK() OVER (ORDER BY z.executor),
               z.free_p, z.free_r, z.free_t, z.free_m, z.free_e, 'u'
        FROM (
            SELECT g.id, g.pool, g.priority_weight, g.run_after, g.map_index, g.pool_slots, g.dag_run_id,
                   g.dag_id, g.task_id, g.executor,
                   CASE WHEN p.slots >= 0 THEN p.slots - COALESCE(up.n, 0) END AS free_p,
                   d.max_active_tasks - COALESCE(ur.n, 0) AS free_r,
                   t.max_active_tis_per_dag - COALESCE(ut.n, 0) AS free_t,
                   t.max_active_tis_per_dagrun - COALESCE(um.n, 0) AS free_m,
                   ex.parallelism - COALESCE(ue.n, 0) AS free_e,
                   (NOT d.is_paused AND NOT d.is_draining AND NOT v_drain_all) AS runs_now
            FROM qt27_page g
            JOIN dag_run r ON r.id = g.dag_run_id AND r.state = 'running'
            JOIN dag d ON d.dag_id = g.dag_id AND d.is_active
            JOIN task t ON t.dag_id = g.dag_id AND t.task_id = g.task_id AND t.is_active
            JOIN executor ex ON ex.name = g.executor
            JOIN pool p ON p.name = g.pool
            LEFT JOIN qt27_used_pool up ON up.pool = g.pool
            LEFT JOIN qt27_used_run ur ON ur.dag_run_id = g.dag_run_id
            LEFT JOIN qt27_used_task ut ON ut.dag_id = g.dag_id AND ut.task_id = g.task_id
            LEFT JOIN qt27_used_task_run um ON um.dag_run_id = g.dag_run_id AND um.task_id = g.task_id
            LEFT JOIN qt27_used_executor ue ON ue.executor = g.executor
        ) z
        WHERE (z.free_p IS NULL OR z.free_p >= z.pool_slots)
          AND (z.free_r IS NULL OR z.free_r >= 1)
          AND (z.free_t IS NULL OR z.free_t >= 1)
          AND (z.free_m IS NULL OR z.free_m >= 1)
          AND (z.free_e IS NULL OR z.free_e >= 1)
          AND (z.runs_now OR EXISTS (SELECT 1 FROM task_instance x WHERE x.id = z.id AND x.next_method IS NOT NULL));
        DELETE FROM qt27_page;

        -- 4. Passes until the first v_left accepted are known (max_tis aside, see below).
        passes: LOOP
            -- Accept: the running demand of everything not rejected fits every limit.
            DELETE FROM qt27_verdict;
            INSERT INTO qt27_verdict (pos)
            SELECT w.pos FROM (
                SELECT c.pos, c.status, c.free_p, c.free_r, c.free_t, c.free_m, c.free_e,
                       SUM(c.pool_slots) OVER wp AS p_sum, COUNT(*) OVER wr AS r_sum, COUNT(*) OVER wt AS t_sum,
                       COUNT(*) OVER wm AS m_sum, COUNT(*) OVER we AS e_sum
                FROM qt27_cand c
                WHERE c.status <> 'r'   -- a rejected candidate uses nothing
                WINDOW wp AS (PARTITION BY c.pk ORDER BY c.pos), wr AS (PARTITION BY c.dag_run_id ORDER BY c.pos),
                       wt AS (PARTITION BY c.tk ORDER BY c.pos), wm AS (PARTITION BY c.mk ORDER BY c.pos),
                       we AS (PARTITION BY c.ek ORDER BY c.pos)
            ) w
            WHERE w.status = 'u'
              AND (w.free_p IS NULL OR w.p_sum <= w.free_p) AND (w.free_r IS NULL OR w.r_sum <= w.free_r)
              AND (w.free_t IS NULL OR w.t_sum <= w.free_t) AND (w.free_m IS NULL OR w.m_sum <= w.free_m)
              AND (w.free_e IS NULL OR w.e_sum <= w.free_e);
            UPDATE qt27_cand c JOIN qt27_verdict v ON v.pos = c.pos SET c.status = 'a';

            -- Reject: what is accepted ahead (including just now) plus its own demand does not fit.
            DELETE FROM qt27_verdict;
            INSERT INTO qt27_verdict (pos)
            SELECT w.pos FROM (
                SELECT c.pos, c.status, c.pool_slots, c.free_p, c.free_r, c.free_t, c.free_m, c.free_e,
                       SUM(CASE WHEN c.status = 'a' THEN c.pool_slots ELSE 0 END) OVER wp AS p_acc,
                       SUM(CASE WHEN c.status = 'a' THEN 1 ELSE 0 END) OVER wr AS r_acc,
                       SUM(CASE WHEN c.status = 'a' THEN 1 ELSE 0 END) OVER wt AS t_acc,
                       SUM(CASE WHEN c.status = 'a' THEN 1 ELSE 0 END) OVER wm AS m_acc,
                       SUM(CASE WHEN c.status = 'a' THEN 1 ELSE 0 END) OVER we AS e_acc
                FROM qt27_cand c
                WHERE c.status <> 'r'
                WINDOW wp AS (PARTITION BY c.pk ORDER BY c.pos), wr AS (PARTITION BY c.dag_run_id ORDER BY c.pos),
                       wt AS (PARTITION BY c.tk ORDER BY c.pos), wm AS (PARTITION BY c.mk ORDER BY c.pos),
                       we AS (PARTITION BY c.ek ORDER BY c.pos)
            ) w
            WHERE w.status = 'u'
              AND (w.p_acc + w.pool_slots > w.free_p OR w.r_acc + 1 > w.free_r OR w.t_acc + 1 > w.free_t
                   OR w.m_acc + 1 > w.free_m OR w.e_acc + 1 > w.free_e);
            UPDATE qt27_cand c JOIN qt27_verdict v ON v.pos = c.pos SET c.status = 'r';

            -- Done when everything ahead of the first undecided candidate is decided and holds
            -- v_left accepted: what comes after cannot be among the first v_left.
            SELECT MIN(c.pos) INTO v_first_open FROM qt27_cand c WHERE c.status = 'u';
            IF v_first_open IS NULL THEN
                LEAVE passes;
            END IF;
            SELECT COUNT(*) INTO v_n FROM qt27_cand c WHERE c.status = 'a' AND c.pos < v_first_open;
            IF v_n >= v_left THEN
                LEAVE passes;
            END IF;
        END LOOP;

        -- max_tis: greedy with a limit of n takes the first n of what greedy without it takes,
        -- so the passes ignore it; only the first v_left accepted are kept.
        SELECT MAX(x.pos) INTO v_cut
        FROM (SELECT c.pos FROM qt27_cand c WHERE c.status = 'a' ORDER BY c.pos LIMIT v_left) x;
        UPDATE qt27_cand c SET c.status = 'x' WHERE c.status = 'a' AND c.pos > v_cut;

        -- 5. Charge what this batch took to the used counts, one kind of limit per statement.
        INSERT INTO qt27_used_pool (pool, n)
        SELECT c.pool, SUM(c.pool_slots) FROM qt27_cand c WHERE c.status = 'a' GROUP BY c.pool
        ON DUPLICATE KEY UPDATE n = n + VALUES(n);
        -- (A partition new to these tables had nothing used: its cap is its free capacity.)
        INSERT INTO qt27_used_run (dag_run_id, n, cap)
        SELECT c.dag_run_id, COUNT(*), MIN(c.free_r) FROM qt27_cand c
        WHERE c.status = 'a' AND c.free_r IS NOT NULL GROUP BY c.dag_run_id
        ON DUPLICATE KEY UPDATE n = n + VALUES(n);
        INSERT INTO qt27_used_task (dag_id, task_id, n, cap)
        SELECT c.dag_id, c.task_id, COUNT(*), MIN(c.free_t) FROM qt27_cand c
        WHERE c.status = 'a' AND c.free_t IS NOT NULL GROUP BY c.dag_id, c.task_id
        ON DUPLICATE KEY UPDATE n = n + VALUES(n);
        INSERT INTO qt27_used_task_run (dag_run_id, task_id, n, cap)
        SELECT c.dag_run_id, c.task_id, COUNT(*), MIN(c.free_m) FROM qt27_cand c
        WHERE c.status = 'a' AND c.free_m IS NOT NULL GROUP BY c.dag_run_id, c.task_id
        ON DUPLICATE KEY UPDATE n = n + VALUES(n);
        INSERT INTO qt27_used_executor (executor, n, cap)
        SELECT c.executor, COUNT(*), MIN(c.free_e) FROM qt27_cand c
        WHERE c.status = 'a' AND c.free_e IS NOT NULL GROUP BY c.executor
        ON DUPLICATE KEY UPDATE n = n + VALUES(n);

        INSERT INTO qt27_accepted (id) SELECT c.id FROM qt27_cand c WHERE c.status = 'a';
        SET v_left = v_left - ROW_COUNT();
        DELETE FROM qt27_cand;
        -- Another batch means pruning or rejections ate this one: read deeper next time.
        SET v_factor = LEAST(v_factor * 2, 256);
    END WHILE;

    UPDATE qt27_accepted a
    STRAIGHT_JOIN task_instance ti ON a.id = ti.id
    SET ti.state = 'queued', ti.queued_at = v_now, ti.queued_by_job_id = p_job_id, ti.updated_at = v_now
    WHERE ti.state = 'scheduled';

    IF v_has_res THEN
        DELETE x FROM qt27_accepted a STRAIGHT_JOIN pool_reservation x ON x.ti_id = a.id;   -- R4. served (led by the ids)
    END IF;

    -- The accepted TIs that the compare-and-set above moved (they are queued, stamped now by us).
    SELECT ti.id AS ti_id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, ti.pool, ti.queue,
           ti.executor, ti.priority_weight
    FROM qt27_accepted a
    JOIN task_instance ti ON ti.id = a.id
    WHERE ti.state = 'queued' AND ti.queued_at = v_now AND ti.queued_by_job_id <=> p_job_id
    ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id;
END
