-- fold_usage_v2(OUT n): fold_usage_v1 (read sql/mysql/fold_usage_v1.sql, and
-- sql/postgresql/fold_usage_v1.sql for the contract) with every join of its deletes written in the
-- order it must run, and its scratch table in Aria on MariaDB. MySQL/MariaDB only (PostgreSQL's
-- fold deletes with RETURNING and has neither problem).
--
-- Why: v1 deletes the folded rows with `DELETE usage_delta FROM usage_delta JOIN fold_usage_d`
-- and leaves the join order to the optimizer. With a few hundred rows to fold MariaDB may scan
-- usage_delta, with locking reads, and probe the copy, instead of probing usage_delta by primary
-- key for each copied row. Such a scan waits for every delta row another transaction wrote and
-- has not committed (a worker finishing a TI, a console left open), under the scheduler's lock,
-- until that transaction ends or innodb_lock_wait_timeout fails the call (error 1205). Measured on
-- MariaDB 10.11 with one open writer: 10 and 200 rows to fold did not wait, 600 and 3,000 did,
-- to the timeout (the order flips with the statistics: after an ANALYZE of the empty table, 3,000
-- did not). Here the copy drives (STRAIGHT_JOIN): each copied row is committed, and only a fold
-- deletes delta rows (under the lock), so its probes wait for nobody. The clean-up of counters
-- that fell to 0 is driven from the keys the fold touched the same way (the counters have no
-- other writer, so there it saves a scan of a counter table, not a wait).
-- The scratch table: v1 names no engine, so MariaDB makes it an InnoDB temporary table
-- (default_tmp_storage_engine unset), which every one of the fold's statements reads or writes.
-- Here it is made in Aria, as queue_tis's page and log tables are (the session's engine for
-- temporary tables switched for the CREATE only), under its own name: a session that ran v1 keeps
-- v1's table. Not in MEMORY: it holds every delta row a fold takes in, which is unbounded (a
-- scheduler back after a stop folds all that finished meanwhile). Aria is not transactional: a
-- call rolled back leaves rows in fold_usage_d2, which the next fold empties before it copies.
-- LOCK: the CALLER holds scheduler_lock('queue_tis'), FOR UPDATE. This takes the row locks of
-- the delta rows it deletes and of the counter rows it writes; it waits for no writer.
CREATE PROCEDURE fold_usage_v2(OUT p_n INT)
BEGIN
    DECLARE v_tmp_engine VARCHAR(64);  -- the session's default_tmp_storage_engine, put back
    SET v_tmp_engine = @@session.default_tmp_storage_engine;
    IF VERSION() LIKE '%MariaDB%' THEN
        SET SESSION default_tmp_storage_engine = 'Aria';
    END IF;
    CREATE TEMPORARY TABLE IF NOT EXISTS fold_usage_d2 (
        id BIGINT PRIMARY KEY, kind VARCHAR(20), dag_run_id BIGINT, dag_id VARCHAR(250), task_id VARCHAR(250),
        pool VARCHAR(250), executor VARCHAR(250), n INT, slots INT);
    SET SESSION default_tmp_storage_engine = v_tmp_engine;
    DELETE FROM fold_usage_d2;
    INSERT INTO fold_usage_d2 SELECT d.id, d.kind, d.dag_run_id, d.dag_id, d.task_id, d.pool, d.executor, d.n, d.slots
    FROM usage_delta d;
    SET p_n = ROW_COUNT();
    IF p_n > 0 THEN
        DELETE usage_delta FROM fold_usage_d2 f STRAIGHT_JOIN usage_delta ON usage_delta.id = f.id;
        INSERT INTO used_pool (pool, slots)
        SELECT d.pool, SUM(d.slots) FROM fold_usage_d2 d WHERE d.kind IS NULL OR d.kind = 'pool'
        GROUP BY d.pool HAVING SUM(d.slots) <> 0
        ON DUPLICATE KEY UPDATE slots = used_pool.slots + VALUES(slots);
        INSERT INTO used_run (dag_run_id, dag_id, n, cap)
        SELECT d.dag_run_id, MIN(d.dag_id), SUM(d.n), (SELECT g.max_active_tasks FROM dag g WHERE g.dag_id = MIN(d.dag_id))
        FROM fold_usage_d2 d WHERE d.kind IS NULL OR d.kind = 'run'
        GROUP BY d.dag_run_id HAVING SUM(d.n) <> 0
        ON DUPLICATE KEY UPDATE n = used_run.n + VALUES(n), cap = VALUES(cap);
        INSERT INTO used_task (dag_id, task_id, n, cap)
        SELECT d.dag_id, d.task_id, SUM(d.n),
               (SELECT k.max_active_tis_per_dag FROM task k WHERE k.dag_id = d.dag_id AND k.task_id = d.task_id)
        FROM fold_usage_d2 d WHERE d.kind IS NULL OR d.kind = 'task'
        GROUP BY d.dag_id, d.task_id HAVING SUM(d.n) <> 0
        ON DUPLICATE KEY UPDATE n = used_task.n + VALUES(n), cap = VALUES(cap);
        INSERT INTO used_task_run (dag_run_id, task_id, dag_id, n, cap)
        SELECT d.dag_run_id, d.task_id, MIN(d.dag_id), SUM(d.n),
               (SELECT k.max_active_tis_per_dagrun FROM task k WHERE k.dag_id = MIN(d.dag_id) AND k.task_id = d.task_id)
        FROM fold_usage_d2 d
        WHERE d.kind IS NULL OR d.kind = 'task_run'
        GROUP BY d.dag_run_id, d.task_id HAVING SUM(d.n) <> 0
        ON DUPLICATE KEY UPDATE n = used_task_run.n + VALUES(n), cap = VALUES(cap);
        INSERT INTO used_executor (executor, n, cap)
        SELECT d.executor, SUM(d.n), (SELECT x.parallelism FROM executor x WHERE x.name = d.executor)
        FROM fold_usage_d2 d WHERE d.kind IS NULL OR d.kind = 'executor'
        GROUP BY d.executor HAVING SUM(d.n) <> 0
        ON DUPLICATE KEY UPDATE n = used_executor.n + VALUES(n), cap = VALUES(cap);
        -- Counters that fell to 0, among the keys this fold touched.
        DELETE u FROM (SELECT DISTINCT d.pool FROM fold_usage_d2 d) k STRAIGHT_JOIN used_pool u ON u.pool = k.pool
        WHERE u.slots = 0;
        DELETE u FROM (SELECT DISTINCT d.dag_run_id FROM fold_usage_d2 d) k STRAIGHT_JOIN used_run u ON u.dag_run_id = k.dag_run_id
        WHERE u.n = 0;
        DELETE u FROM (SELECT DISTINCT d.dag_id, d.task_id FROM fold_usage_d2 d) k
            STRAIGHT_JOIN used_task u ON u.dag_id = k.dag_id AND u.task_id = k.task_id WHERE u.n = 0;
        DELETE u FROM (SELECT DISTINCT d.dag_run_id, d.task_id FROM fold_usage_d2 d) k
            STRAIGHT_JOIN used_task_run u ON u.dag_run_id = k.dag_run_id AND u.task_id = k.task_id WHERE u.n = 0;
        DELETE u FROM (SELECT DISTINCT d.executor FROM fold_usage_d2 d) k STRAIGHT_JOIN used_executor u ON u.executor = k.executor
        WHERE u.n = 0;
    END IF;
END
