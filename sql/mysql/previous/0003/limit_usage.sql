-- previous/0003/limit_usage.sql: limit_usage as revisions 0001 and 0002 install it and as the
-- downgrade of 0003 puts it back. No MySQL text older than 0003 exists (the MySQL port was
-- written after 0003's changes), so this is sql/mysql/previous/0004/limit_usage.sql (the text
-- 0003 installs) with exactly 0003's changes taken out (a deferred TI holds only its pool's
-- slots, when the pool has include_deferred, and no other limit), as
-- `git diff 9f4dc93 ca90e4f -- sql/postgresql/limit_usage.sql` shows them for PostgreSQL
-- (whose text before 0003 is sql/postgresql/previous/0003/limit_usage.sql).
--
-- limit_usage: every limited partition of DESIGN section 4 with its cap, what is used and what
-- is free, counted exactly as queue_tis_v1 counts (it reads this view). One row per
--   pool      key = pool name        used = sum(pool_slots) of queued + running TIs, plus deferred
--                                           ones when the pool has include_deferred; slots -1 = no row
--   run       key = dag_run id       used = queued + running TIs of the run (DAG max_active_tasks)
--   task      key = dag_id.task_id   used = queued + running TIs of the task in all runs
--   task_run  key = run_id.task_id   used = queued + running TIs of the task in one run
--   executor  key = executor name    used = queued + running TIs of the executor (parallelism)
-- Partitions without a limit (NULL) have no row: unlimited.
-- MySQL: `key` is a reserved word (quote it: `key`); SUM(CASE ...) for FILTER; no LATERAL;
-- CONCAT for ||; numbers cast to SIGNED (SUM returns DECIMAL). Keys are utf8mb4_bin like
-- the tables (the engine's connections use that collation when they install the view).
CREATE VIEW limit_usage AS
WITH active AS (  -- the few TIs that hold capacity, read once through the state-leading index
    SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.pool_slots, ti.executor, ti.state
    FROM task_instance ti
    WHERE ti.state IN ('queued', 'running', 'deferred')
), by_pool AS (
    SELECT a.pool, SUM(CASE WHEN a.state <> 'deferred' THEN a.pool_slots ELSE 0 END) AS slots,
           SUM(CASE WHEN a.state = 'deferred' THEN a.pool_slots ELSE 0 END) AS deferred_slots
    FROM active a GROUP BY a.pool
), by_run AS (
    SELECT a.dag_run_id, COUNT(*) AS n FROM active a WHERE a.state <> 'deferred' GROUP BY a.dag_run_id
), by_task AS (
    SELECT a.dag_id, a.task_id, COUNT(*) AS n FROM active a WHERE a.state <> 'deferred' GROUP BY a.dag_id, a.task_id
), by_task_run AS (
    SELECT a.dag_run_id, a.task_id, COUNT(*) AS n FROM active a WHERE a.state <> 'deferred' GROUP BY a.dag_run_id, a.task_id
), by_executor AS (
    SELECT a.executor, COUNT(*) AS n FROM active a WHERE a.state <> 'deferred' GROUP BY a.executor
)
SELECT 'pool' AS kind, p.name AS `key`, p.slots AS cap,
       CAST(COALESCE(b.slots, 0) + CASE WHEN p.include_deferred THEN COALESCE(b.deferred_slots, 0) ELSE 0 END
            AS SIGNED) AS used,
       CAST(p.slots - COALESCE(b.slots, 0) - CASE WHEN p.include_deferred THEN COALESCE(b.deferred_slots, 0) ELSE 0 END
            AS SIGNED) AS free
FROM pool p
LEFT JOIN by_pool b ON b.pool = p.name
WHERE p.slots >= 0
UNION ALL
SELECT 'run', CAST(r.id AS CHAR), d.max_active_tasks, CAST(COALESCE(b.n, 0) AS SIGNED),
       CAST(d.max_active_tasks - COALESCE(b.n, 0) AS SIGNED)
FROM dag_run r
JOIN dag d ON d.dag_id = r.dag_id AND d.max_active_tasks IS NOT NULL
LEFT JOIN by_run b ON b.dag_run_id = r.id
WHERE r.state = 'running'
UNION ALL
SELECT 'task', CONCAT(t.dag_id, '.', t.task_id), t.max_active_tis_per_dag, CAST(COALESCE(b.n, 0) AS SIGNED),
       CAST(t.max_active_tis_per_dag - COALESCE(b.n, 0) AS SIGNED)
FROM task t
LEFT JOIN by_task b ON b.dag_id = t.dag_id AND b.task_id = t.task_id
WHERE t.max_active_tis_per_dag IS NOT NULL
UNION ALL
SELECT 'task_run', CONCAT(r.id, '.', t.task_id), t.max_active_tis_per_dagrun, CAST(COALESCE(b.n, 0) AS SIGNED),
       CAST(t.max_active_tis_per_dagrun - COALESCE(b.n, 0) AS SIGNED)
FROM task t
JOIN dag_run r ON r.dag_id = t.dag_id AND r.state = 'running'
LEFT JOIN by_task_run b ON b.dag_run_id = r.id AND b.task_id = t.task_id
WHERE t.max_active_tis_per_dagrun IS NOT NULL
UNION ALL
SELECT 'executor', e.name, e.parallelism, CAST(COALESCE(b.n, 0) AS SIGNED),
       CAST(e.parallelism - COALESCE(b.n, 0) AS SIGNED)
FROM executor e
LEFT JOIN by_executor b ON b.executor = e.name
WHERE e.parallelism IS NOT NULL
