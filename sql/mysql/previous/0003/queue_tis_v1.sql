-- previous/0003/queue_tis_v1.sql: queue_tis_v1 as revisions 0001 and 0002 install it and as the
-- downgrade of 0003 puts it back. No MySQL text older than 0003 exists (the MySQL port was
-- written after 0003's changes), so this is sql/mysql/queue_tis_v1.sql with exactly 0003's
-- changes taken out (no drain check, no resumes of paused DAGs: candidates are TIs of unpaused
-- DAGs), as `git diff 9f4dc93 ca90e4f -- sql/postgresql/queue_tis_v1.sql` shows them for
-- PostgreSQL (whose text before 0003 is sql/postgresql/previous/0003/queue_tis_v1.sql).
--
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
-- HOW: the same five steps as sql/postgresql/queue_tis_v1.sql (read its header), in batches
-- that are prefixes of that order:
--  1. Page: from every pool that still has room, its next candidates in queue order through
--     the index task_instance_queue_pool, page = page_factor * free slots + 8 (doubling with
--     every further batch of the call, at most 256 per free slot or max(64, 4 * max_tis)).
--  2. Cut: the batch ends at the earliest last row of a full page.
--  3. Prune candidates whose run, task or executor is full or whose run/DAG is not eligible.
--  4. Accept / reject window passes until the first max_tis accepted are settled.
--  5. Charge the accepted demand to every partition; next batch.
--
-- LOCK: the row scheduler_lock('queue_tis'), held until commit. Only this procedure turns a
-- scheduled TI into a queued one (the only move that adds to a limit's usage), so while it
-- holds the lock the counts it read cannot grow. MariaDB refuses NOWAIT inside a stored
-- procedure (error 1314), so the row is taken FOR UPDATE SKIP LOCKED (MySQL 8 and MariaDB
-- 10.6+): no row means another transaction holds it, and the procedure raises at once what
-- MySQL 8's NOWAIT raises, error 3572 ER_LOCK_NOWAIT (SQLSTATE HY000), which
-- engine.db.is_lock_busy recognises; the scheduler reports "busy" and goes on. The counts must
-- see what other transactions committed up to the moment the lock is taken: the procedure
-- refuses to run under REPEATABLE READ (whose snapshot would be older than the lock).
-- INVARIANT: no limit is exceeded; a TI is queued once (compare-and-set on 'scheduled').
-- CALLERS MAY ASSUME: the returned TIs are queued and stamped (queued_by_job_id, queued_at), in
-- queue order; nothing else changed.
--
-- MySQL / MariaDB differences, each where it happens below:
--  * a PROCEDURE whose final SELECT returns the rows (CALL queue_tis_v1(...)); no parameter
--    defaults (the named query passes page_factor 2, PostgreSQL's default);
--  * scratch space is session temporary tables named after the procedure (no ON COMMIT
--    DELETE ROWS: emptied at the start of each call). MySQL cannot open one temporary table
--    twice in a statement ("Can't reopen table"), so every statement reads each at most once:
--    limit_usage is split into one table per kind of limit, with typed keys, so that step 3
--    joins five different tables; the window passes write their verdicts to another table; the
--    charge is five UPDATEs instead of one over a UNION;
--  * no LATERAL in MariaDB: step 1 is a cursor over the open pools, one INSERT ... SELECT ...
--    LIMIT per pool; the keyset condition is spelled out (row-value comparisons do not use the
--    index as well in MySQL);
--  * no FILTER on aggregates: SUM(CASE ...) OVER (...) (window functions: MariaDB 10.2+, MySQL 8);
--  * no arrays: the accepted ids go to a temporary table; no UPDATE ... RETURNING: update by a
--    join driven by that table (STRAIGHT_JOIN: only those rows are read and locked), then
--    select the rows back;
--  * `key` and `rank` are reserved words (the column is quoted, the position is `pos`);
--  * the isolation level is read from information_schema.SESSION_VARIABLES (MariaDB) or
--    performance_schema.session_variables (MySQL 8): @@tx_isolation (MariaDB 10.x) and
--    @@transaction_isolation (MySQL 8) are each unknown to the other server, and a routine that
--    names an unknown system variable cannot be created.
CREATE PROCEDURE queue_tis_v1(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
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
    DECLARE v_done       BOOLEAN DEFAULT FALSE;
    DECLARE v_pool       VARCHAR(250);
    DECLARE v_page       INT;
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
        SELECT p.name, CASE WHEN k.free IS NULL THEN v_page_max
                            ELSE LEAST(v_page_max, v_factor * k.free + 8) END
        FROM pool p
        LEFT JOIN queue_tis_v1_cap_pool k ON k.pool = p.name
        WHERE p.slots < 0 OR k.free >= 1
        ORDER BY p.name;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET v_left = p_max_tis;
    SET v_page_max = GREATEST(64, LEAST(p_max_tis * 4, 10000));
    SET v_factor = COALESCE(p_page_factor, 2);

    -- The counts below must see what other transactions committed up to the moment the lock
    -- is taken; a REPEATABLE READ snapshot would be older than the lock.
    BEGIN
        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;  -- a table the server lacks: unknown
        SELECT MAX(v.variable_value) INTO v_isolation FROM information_schema.SESSION_VARIABLES v
        WHERE v.variable_name IN ('TX_ISOLATION', 'TRANSACTION_ISOLATION');
        IF v_isolation IS NULL THEN
            SELECT MAX(v.variable_value) INTO v_isolation FROM performance_schema.session_variables v
            WHERE v.variable_name = 'transaction_isolation';
        END IF;
    END;
    IF v_isolation IS NOT NULL AND v_isolation <> 'READ-COMMITTED' THEN
        SET v_isolation = CONCAT('queue_tis_v1 needs READ COMMITTED isolation, not ', v_isolation);
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
            MESSAGE_TEXT = 'queue_tis_v1 is busy: another scheduler holds scheduler_lock queue_tis';
    END IF;

    -- Session-local scratch tables, created once per connection, emptied here.
    CREATE TEMPORARY TABLE IF NOT EXISTS queue_tis_v1_cap (
        kind VARCHAR(20) NOT NULL, `key` VARCHAR(520) NOT NULL, free INT, PRIMARY KEY (kind, `key`));
    CREATE TEMPORARY TABLE IF NOT EXISTS queue_tis_v1_cap_pool (pool VARCHAR(250) PRIMARY KEY, free INT);
    CREATE TEMPORARY TABLE IF NOT EXISTS queue_tis_v1_cap_run (dag_run_id BIGINT PRIMARY KEY, free INT);
    CREATE TEMPORARY TABLE IF NOT EXISTS queue_tis_v1_cap_task (
        dag_id VARCHAR(250), task_id VARCHAR(250), free INT, PRIMARY KEY (dag_id, task_id));
    CREATE TEMPORARY TABLE IF NOT EXISTS queue_tis_v1_cap_task_run (
        dag_run_id BIGINT, task_id VARCHAR(250), free INT, PRIMARY KEY (dag_run_id, task_id));
    CREATE TEMPORARY TABLE IF NOT EXISTS queue_tis_v1_cap_executor (executor VARCHAR(250) PRIMARY KEY, free INT);
    CREATE TEMPORARY TABLE IF NOT EXISTS queue_tis_v1_page (
        id BIGINT PRIMARY KEY, pool VARCHAR(250), priority_weight INT, run_after DATETIME(6), map_index INT,
        pool_slots INT, dag_run_id BIGINT, dag_id VARCHAR(250), task_id VARCHAR(250), executor VARCHAR(250));
    -- pk, tk, mk, ek number the pool, task, (run, task) and executor partitions of a batch:
    -- the window passes sort on small integers instead of names.
    CREATE TEMPORARY TABLE IF NOT EXISTS queue_tis_v1_cand (
        pos INT PRIMARY KEY, id BIGINT, pool VARCHAR(250), pool_slots INT, dag_run_id BIGINT,
        dag_id VARCHAR(250), task_id VARCHAR(250), executor VARCHAR(250),
        pk INT, tk INT, mk INT, ek INT, free_p INT, free_r INT, free_t INT, free_m INT, free_e INT,
        status CHAR(1));
    CREATE TEMPORARY TABLE IF NOT EXISTS queue_tis_v1_verdict (pos INT PRIMARY KEY);
    CREATE TEMPORARY TABLE IF NOT EXISTS queue_tis_v1_accepted (id BIGINT PRIMARY KEY);
    DELETE FROM queue_tis_v1_cap;
    DELETE FROM queue_tis_v1_cap_pool;
    DELETE FROM queue_tis_v1_cap_run;
    DELETE FROM queue_tis_v1_cap_task;
    DELETE FROM queue_tis_v1_cap_task_run;
    DELETE FROM queue_tis_v1_cap_executor;
    DELETE FROM queue_tis_v1_page;
    DELETE FROM queue_tis_v1_cand;
    DELETE FROM queue_tis_v1_verdict;
    DELETE FROM queue_tis_v1_accepted;

    -- Free capacity of every limited partition, read once (no row: unlimited).
    INSERT INTO queue_tis_v1_cap (kind, `key`, free) SELECT u.kind, u.`key`, u.free FROM limit_usage u;
    -- One table per kind, keyed by the columns a candidate carries (the text keys are the ones
    -- limit_usage builds, found again from the rows they were built from).
    INSERT INTO queue_tis_v1_cap_pool (pool, free)
    SELECT k.`key`, k.free FROM queue_tis_v1_cap k WHERE k.kind = 'pool';
    INSERT INTO queue_tis_v1_cap_run (dag_run_id, free)
    SELECT r.id, k.free FROM dag_run r
    JOIN queue_tis_v1_cap k ON k.kind = 'run' AND k.`key` = CAST(r.id AS CHAR)
    WHERE r.state = 'running';
    INSERT INTO queue_tis_v1_cap_task (dag_id, task_id, free)
    SELECT t.dag_id, t.task_id, k.free FROM task t
    JOIN queue_tis_v1_cap k ON k.kind = 'task' AND k.`key` = CONCAT(t.dag_id, '.', t.task_id)
    WHERE t.max_active_tis_per_dag IS NOT NULL;
    INSERT INTO queue_tis_v1_cap_task_run (dag_run_id, task_id, free)
    SELECT r.id, t.task_id, k.free FROM task t
    JOIN dag_run r ON r.dag_id = t.dag_id AND r.state = 'running'
    JOIN queue_tis_v1_cap k ON k.kind = 'task_run' AND k.`key` = CONCAT(r.id, '.', t.task_id)
    WHERE t.max_active_tis_per_dagrun IS NOT NULL;
    INSERT INTO queue_tis_v1_cap_executor (executor, free)
    SELECT k.`key`, k.free FROM queue_tis_v1_cap k WHERE k.kind = 'executor';

    batches: WHILE v_left > 0 AND NOT v_last DO
        -- 1. A page per pool with room.
        SET c_pw = NULL, c_after = NULL, c_map = NULL, c_id = NULL;
        SET v_done = FALSE;
        OPEN c_pools;
        pools: LOOP
            FETCH c_pools INTO v_pool, v_page;
            IF v_done THEN
                LEAVE pools;
            END IF;
            INSERT INTO queue_tis_v1_page (id, pool, priority_weight, run_after, map_index, pool_slots,
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
            ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id
            LIMIT v_page;
            IF ROW_COUNT() = v_page THEN
                -- 2. A full page: candidates beyond its last row are unknown.
                SELECT g.priority_weight, g.run_after, g.map_index, g.id INTO l_pw, l_after, l_map, l_id
                FROM queue_tis_v1_page g WHERE g.pool = v_pool
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
            DELETE FROM queue_tis_v1_page
            WHERE priority_weight < k_pw
               OR (priority_weight = k_pw
                   AND (run_after > k_after
                        OR (run_after = k_after AND (map_index > k_map OR (map_index = k_map AND id > k_id)))));
        END IF;

        -- 3. Prune what greedy would refuse anyway; rank the rest in queue order.
        INSERT INTO queue_tis_v1_cand (pos, id, pool, pool_slots, dag_run_id, dag_id, task_id, executor,
                                       pk, tk, mk, ek, free_p, free_r, free_t, free_m, free_e, status)
        SELECT ROW_NUMBER() OVER (ORDER BY g.priority_weight DESC, g.run_after, g.map_index, g.id),
               g.id, g.pool, g.pool_slots, g.dag_run_id, g.dag_id, g.task_id, g.executor,
               DENSE_RANK() OVER (ORDER BY g.pool), DENSE_RANK() OVER (ORDER BY g.dag_id, g.task_id),
               DENSE_RANK() OVER (ORDER BY g.dag_run_id, g.task_id), DENSE_RANK() OVER (ORDER BY g.executor),
               kp.free, kr.free, kt.free, km.free, ke.free, 'u'
        FROM queue_tis_v1_page g
        JOIN dag_run r ON r.id = g.dag_run_id AND r.state = 'running'
        JOIN dag d ON d.dag_id = g.dag_id AND NOT d.is_paused
        LEFT JOIN queue_tis_v1_cap_pool kp ON kp.pool = g.pool
        LEFT JOIN queue_tis_v1_cap_run kr ON kr.dag_run_id = g.dag_run_id
        LEFT JOIN queue_tis_v1_cap_task kt ON kt.dag_id = g.dag_id AND kt.task_id = g.task_id
        LEFT JOIN queue_tis_v1_cap_task_run km ON km.dag_run_id = g.dag_run_id AND km.task_id = g.task_id
        LEFT JOIN queue_tis_v1_cap_executor ke ON ke.executor = g.executor
        WHERE (kp.free IS NULL OR kp.free >= g.pool_slots)
          AND (kr.free IS NULL OR kr.free >= 1)
          AND (kt.free IS NULL OR kt.free >= 1)
          AND (km.free IS NULL OR km.free >= 1)
          AND (ke.free IS NULL OR ke.free >= 1);
        DELETE FROM queue_tis_v1_page;

        -- 4. Passes until the first v_left accepted are known (max_tis aside, see below).
        passes: LOOP
            -- Accept: the running demand of everything not rejected fits every limit.
            DELETE FROM queue_tis_v1_verdict;
            INSERT INTO queue_tis_v1_verdict (pos)
            SELECT w.pos FROM (
                SELECT c.pos, c.status, c.free_p, c.free_r, c.free_t, c.free_m, c.free_e,
                       SUM(c.pool_slots) OVER wp AS p_sum, COUNT(*) OVER wr AS r_sum, COUNT(*) OVER wt AS t_sum,
                       COUNT(*) OVER wm AS m_sum, COUNT(*) OVER we AS e_sum
                FROM queue_tis_v1_cand c
                WHERE c.status <> 'r'   -- a rejected candidate uses nothing
                WINDOW wp AS (PARTITION BY c.pk ORDER BY c.pos), wr AS (PARTITION BY c.dag_run_id ORDER BY c.pos),
                       wt AS (PARTITION BY c.tk ORDER BY c.pos), wm AS (PARTITION BY c.mk ORDER BY c.pos),
                       we AS (PARTITION BY c.ek ORDER BY c.pos)
            ) w
            WHERE w.status = 'u'
              AND (w.free_p IS NULL OR w.p_sum <= w.free_p) AND (w.free_r IS NULL OR w.r_sum <= w.free_r)
              AND (w.free_t IS NULL OR w.t_sum <= w.free_t) AND (w.free_m IS NULL OR w.m_sum <= w.free_m)
              AND (w.free_e IS NULL OR w.e_sum <= w.free_e);
            UPDATE queue_tis_v1_cand c JOIN queue_tis_v1_verdict v ON v.pos = c.pos SET c.status = 'a';

            -- Reject: what is accepted ahead (including just now) plus its own demand does not fit.
            DELETE FROM queue_tis_v1_verdict;
            INSERT INTO queue_tis_v1_verdict (pos)
            SELECT w.pos FROM (
                SELECT c.pos, c.status, c.pool_slots, c.free_p, c.free_r, c.free_t, c.free_m, c.free_e,
                       SUM(CASE WHEN c.status = 'a' THEN c.pool_slots ELSE 0 END) OVER wp AS p_acc,
                       SUM(CASE WHEN c.status = 'a' THEN 1 ELSE 0 END) OVER wr AS r_acc,
                       SUM(CASE WHEN c.status = 'a' THEN 1 ELSE 0 END) OVER wt AS t_acc,
                       SUM(CASE WHEN c.status = 'a' THEN 1 ELSE 0 END) OVER wm AS m_acc,
                       SUM(CASE WHEN c.status = 'a' THEN 1 ELSE 0 END) OVER we AS e_acc
                FROM queue_tis_v1_cand c
                WHERE c.status <> 'r'
                WINDOW wp AS (PARTITION BY c.pk ORDER BY c.pos), wr AS (PARTITION BY c.dag_run_id ORDER BY c.pos),
                       wt AS (PARTITION BY c.tk ORDER BY c.pos), wm AS (PARTITION BY c.mk ORDER BY c.pos),
                       we AS (PARTITION BY c.ek ORDER BY c.pos)
            ) w
            WHERE w.status = 'u'
              AND (w.p_acc + w.pool_slots > w.free_p OR w.r_acc + 1 > w.free_r OR w.t_acc + 1 > w.free_t
                   OR w.m_acc + 1 > w.free_m OR w.e_acc + 1 > w.free_e);
            UPDATE queue_tis_v1_cand c JOIN queue_tis_v1_verdict v ON v.pos = c.pos SET c.status = 'r';

            -- Done when everything ahead of the first undecided candidate is decided and holds
            -- v_left accepted: what comes after cannot be among the first v_left.
            SELECT MIN(c.pos) INTO v_first_open FROM queue_tis_v1_cand c WHERE c.status = 'u';
            IF v_first_open IS NULL THEN
                LEAVE passes;
            END IF;
            SELECT COUNT(*) INTO v_n FROM queue_tis_v1_cand c WHERE c.status = 'a' AND c.pos < v_first_open;
            IF v_n >= v_left THEN
                LEAVE passes;
            END IF;
        END LOOP;

        -- max_tis: greedy with a limit of n takes the first n of what greedy without it takes,
        -- so the passes ignore it; only the first v_left accepted are kept.
        SELECT MAX(x.pos) INTO v_cut
        FROM (SELECT c.pos FROM queue_tis_v1_cand c WHERE c.status = 'a' ORDER BY c.pos LIMIT v_left) x;
        UPDATE queue_tis_v1_cand c SET c.status = 'x' WHERE c.status = 'a' AND c.pos > v_cut;

        -- 5. Charge what this batch took to every partition, one kind of limit per statement.
        UPDATE queue_tis_v1_cap_pool k
        JOIN (SELECT c.pool, SUM(c.pool_slots) AS used
              FROM queue_tis_v1_cand c WHERE c.status = 'a' GROUP BY c.pool) u ON k.pool = u.pool
        SET k.free = k.free - u.used;
        UPDATE queue_tis_v1_cap_run k
        JOIN (SELECT c.dag_run_id, COUNT(*) AS used
              FROM queue_tis_v1_cand c WHERE c.status = 'a' GROUP BY c.dag_run_id) u ON k.dag_run_id = u.dag_run_id
        SET k.free = k.free - u.used;
        UPDATE queue_tis_v1_cap_task k
        JOIN (SELECT c.dag_id, c.task_id, COUNT(*) AS used
              FROM queue_tis_v1_cand c WHERE c.status = 'a' GROUP BY c.dag_id, c.task_id) u
          ON k.dag_id = u.dag_id AND k.task_id = u.task_id
        SET k.free = k.free - u.used;
        UPDATE queue_tis_v1_cap_task_run k
        JOIN (SELECT c.dag_run_id, c.task_id, COUNT(*) AS used
              FROM queue_tis_v1_cand c WHERE c.status = 'a' GROUP BY c.dag_run_id, c.task_id) u
          ON k.dag_run_id = u.dag_run_id AND k.task_id = u.task_id
        SET k.free = k.free - u.used;
        UPDATE queue_tis_v1_cap_executor k
        JOIN (SELECT c.executor, COUNT(*) AS used
              FROM queue_tis_v1_cand c WHERE c.status = 'a' GROUP BY c.executor) u ON k.executor = u.executor
        SET k.free = k.free - u.used;

        INSERT INTO queue_tis_v1_accepted (id) SELECT c.id FROM queue_tis_v1_cand c WHERE c.status = 'a';
        SET v_left = v_left - ROW_COUNT();
        DELETE FROM queue_tis_v1_cand;
        -- Another batch means pruning or rejections ate this one: read deeper next time.
        SET v_factor = LEAST(v_factor * 2, 256);
    END WHILE;

    UPDATE queue_tis_v1_accepted a
    STRAIGHT_JOIN task_instance ti ON a.id = ti.id
    SET ti.state = 'queued', ti.queued_at = v_now, ti.queued_by_job_id = p_job_id, ti.updated_at = v_now
    WHERE ti.state = 'scheduled';

    -- The accepted TIs that the compare-and-set above moved (they are queued, stamped now by us).
    SELECT ti.id AS ti_id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, ti.pool, ti.queue,
           ti.executor, ti.priority_weight
    FROM queue_tis_v1_accepted a
    JOIN task_instance ti ON ti.id = a.id
    WHERE ti.state = 'queued' AND ti.queued_at = v_now AND ti.queued_by_job_id <=> p_job_id
    ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id;
END
