-- fold_usage_v1(OUT n): adds the committed rows of usage_delta to the usage counters and deletes
-- them; n = how many rows it folded. The MySQL/MariaDB side of sql/postgresql/fold_usage_v1.sql
-- (read it for the contract). MySQL has no DELETE ... RETURNING: the rows are copied to a
-- temporary table by a consistent read, and exactly those are deleted (by id), so a row committed
-- in between is folded by a later call. Each counter it touches also gets its partition's limit
-- now (column cap, a hint: read sql/postgresql/fold_usage_v1.sql).
-- LOCK: the CALLER holds scheduler_lock('queue_tis'), FOR UPDATE.
CREATE PROCEDURE fold_usage_v1(OUT p_n INT)
BEGIN
    CREATE TEMPORARY TABLE IF NOT EXISTS fold_usage_d (
        id BIGINT PRIMARY KEY, kind VARCHAR(20), dag_run_id BIGINT, dag_id VARCHAR(250), task_id VARCHAR(250),
        pool VARCHAR(250), executor VARCHAR(250), n INT, slots INT);
    DELETE FROM fold_usage_d;
    INSERT INTO fold_usage_d SELECT d.id, d.kind, d.dag_run_id, d.dag_id, d.task_id, d.pool, d.executor, d.n, d.slots
    FROM usage_delta d;
    SET p_n = ROW_COUNT();
    IF p_n > 0 THEN
        DELETE usage_delta FROM usage_delta JOIN fold_usage_d f ON f.id = usage_delta.id;
        INSERT INTO used_pool (pool, slots)
        SELECT d.pool, SUM(d.slots) FROM fold_usage_d d WHERE d.kind IS NULL OR d.kind = 'pool'
        GROUP BY d.pool HAVING SUM(d.slots) <> 0
        ON DUPLICATE KEY UPDATE slots = used_pool.slots + VALUES(slots);
        INSERT INTO used_run (dag_run_id, dag_id, n, cap)
        SELECT d.dag_run_id, MIN(d.dag_id), SUM(d.n), (SELECT g.max_active_tasks FROM dag g WHERE g.dag_id = MIN(d.dag_id))
        FROM fold_usage_d d WHERE d.kind IS NULL OR d.kind = 'run'
        GROUP BY d.dag_run_id HAVING SUM(d.n) <> 0
        ON DUPLICATE KEY UPDATE n = used_run.n + VALUES(n), cap = VALUES(cap);
        INSERT INTO used_task (dag_id, task_id, n, cap)
        SELECT d.dag_id, d.task_id, SUM(d.n),
               (SELECT k.max_active_tis_per_dag FROM task k WHERE k.dag_id = d.dag_id AND k.task_id = d.task_id)
        FROM fold_usage_d d WHERE d.kind IS NULL OR d.kind = 'task'
        GROUP BY d.dag_id, d.task_id HAVING SUM(d.n) <> 0
        ON DUPLICATE KEY UPDATE n = used_task.n + VALUES(n), cap = VALUES(cap);
        INSERT INTO used_task_run (dag_run_id, task_id, dag_id, n, cap)
        SELECT d.dag_run_id, d.task_id, MIN(d.dag_id), SUM(d.n),
               (SELECT k.max_active_tis_per_dagrun FROM task k WHERE k.dag_id = MIN(d.dag_id) AND k.task_id = d.task_id)
        FROM fold_usage_d d
        WHERE d.kind IS NULL OR d.kind = 'task_run'
        GROUP BY d.dag_run_id, d.task_id HAVING SUM(d.n) <> 0
        ON DUPLICATE KEY UPDATE n = used_task_run.n + VALUES(n), cap = VALUES(cap);
        INSERT INTO used_executor (executor, n, cap)
        SELECT d.executor, SUM(d.n), (SELECT x.parallelism FROM executor x WHERE x.name = d.executor)
        FROM fold_usage_d d WHERE d.kind IS NULL OR d.kind = 'executor'
        GROUP BY d.executor HAVING SUM(d.n) <> 0
        ON DUPLICATE KEY UPDATE n = used_executor.n + VALUES(n), cap = VALUES(cap);
        -- Counters that fell to 0, among the keys this fold touched.
        DELETE u FROM used_pool u JOIN (SELECT DISTINCT d.pool FROM fold_usage_d d) k ON k.pool = u.pool
        WHERE u.slots = 0;
        DELETE u FROM used_run u JOIN (SELECT DISTINCT d.dag_run_id FROM fold_usage_d d) k ON k.dag_run_id = u.dag_run_id
        WHERE u.n = 0;
        DELETE u FROM used_task u JOIN (SELECT DISTINCT d.dag_id, d.task_id FROM fold_usage_d d) k
            ON k.dag_id = u.dag_id AND k.task_id = u.task_id WHERE u.n = 0;
        DELETE u FROM used_task_run u JOIN (SELECT DISTINCT d.dag_run_id, d.task_id FROM fold_usage_d d) k
            ON k.dag_run_id = u.dag_run_id AND k.task_id = u.task_id WHERE u.n = 0;
        DELETE u FROM used_executor u JOIN (SELECT DISTINCT d.executor FROM fold_usage_d d) k ON k.executor = u.executor
        WHERE u.n = 0;
    END IF;
END
