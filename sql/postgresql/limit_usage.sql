-- limit_usage: every limited partition with its cap, what is used and what is free, counted
-- exactly as queue_tis_v1 and queue_tis_v2 count (both read this view). One row per
--   pool      (pool)                 used = sum(pool_slots) of active TIs; slots -1 = no row
--   run       (dag_run_id)           used = active TIs of the run (DAG max_active_tasks)
--   task      (dag_id, task_id)      used = active TIs of the task in all runs
--   task_run  (dag_run_id, task_id)  used = active TIs of the task in one run
--   executor  (executor)             used = active TIs of the executor (parallelism)
-- A partition is identified by `kind` plus its key columns (the last five: dag_run_id, dag_id,
-- task_id, pool, executor; NULL where not part of that kind's key). Join on those. `key` is a
-- display label only: it joins names with '.', and ids may contain dots, so two partitions can
-- share a label ('x.y' + 'z' and 'x' + 'y.z'). It stays, with its old spelling, because the
-- released queue_tis_v1 reads it; the key columns come last because PostgreSQL can only
-- append columns to a view in place.
-- Active: queued, running or preempting (a victim of preempt_v1 whose try is still stopping:
-- it holds its place until its process is gone), and deferred in a pool with include_deferred. Such a deferred TI
-- keeps its whole place (every limit, not only the pool), so fire_trigger_v1 can put it back
-- to `queued` without adding to any count (docs/deferral.md); elsewhere a deferred TI holds nothing.
-- Partitions without a limit (NULL) have no row: unlimited.
CREATE VIEW limit_usage AS
WITH active AS (  -- the few TIs that hold capacity, read once through the state-leading index
    SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.pool_slots, ti.executor, ti.state,
           (ti.state <> 'deferred' OR coalesce(p.include_deferred, false)) AS holds
    FROM task_instance ti
    LEFT JOIN pool p ON p.name = ti.pool
    WHERE ti.state IN ('queued', 'running', 'preempting', 'deferred')
), by_pool AS (
    SELECT a.pool, sum(a.pool_slots) FILTER (WHERE a.state <> 'deferred') AS slots,
           sum(a.pool_slots) FILTER (WHERE a.state = 'deferred') AS deferred_slots
    FROM active a GROUP BY a.pool
), by_run AS (
    SELECT a.dag_run_id, count(*) AS n FROM active a WHERE a.holds GROUP BY a.dag_run_id
), by_task AS (
    SELECT a.dag_id, a.task_id, count(*) AS n FROM active a WHERE a.holds GROUP BY a.dag_id, a.task_id
), by_task_run AS (
    SELECT a.dag_run_id, a.task_id, count(*) AS n FROM active a WHERE a.holds GROUP BY a.dag_run_id, a.task_id
), by_executor AS (
    SELECT a.executor, count(*) AS n FROM active a WHERE a.holds GROUP BY a.executor
)
SELECT 'pool'::text AS kind, p.name AS key, p.slots AS cap, u.used, p.slots - u.used AS free,
       NULL::bigint AS dag_run_id, NULL::text AS dag_id, NULL::text AS task_id, p.name AS pool, NULL::text AS executor
FROM pool p
LEFT JOIN by_pool b ON b.pool = p.name
CROSS JOIN LATERAL (SELECT (coalesce(b.slots, 0)
                            + CASE WHEN p.include_deferred THEN coalesce(b.deferred_slots, 0) ELSE 0 END)::int AS used) u
WHERE p.slots >= 0
UNION ALL
SELECT 'run', r.id::text, d.max_active_tasks, coalesce(b.n, 0)::int, (d.max_active_tasks - coalesce(b.n, 0))::int,
       r.id, NULL, NULL, NULL, NULL
FROM dag_run r
JOIN dag d ON d.dag_id = r.dag_id AND d.max_active_tasks IS NOT NULL
LEFT JOIN by_run b ON b.dag_run_id = r.id
WHERE r.state = 'running'
UNION ALL
SELECT 'task', t.dag_id || '.' || t.task_id, t.max_active_tis_per_dag, coalesce(b.n, 0)::int,
       (t.max_active_tis_per_dag - coalesce(b.n, 0))::int,
       NULL, t.dag_id, t.task_id, NULL, NULL
FROM task t
LEFT JOIN by_task b ON b.dag_id = t.dag_id AND b.task_id = t.task_id
WHERE t.max_active_tis_per_dag IS NOT NULL
UNION ALL
SELECT 'task_run', r.id || '.' || t.task_id, t.max_active_tis_per_dagrun, coalesce(b.n, 0)::int,
       (t.max_active_tis_per_dagrun - coalesce(b.n, 0))::int,
       r.id, NULL, t.task_id, NULL, NULL
FROM task t
JOIN dag_run r ON r.dag_id = t.dag_id AND r.state = 'running'
LEFT JOIN by_task_run b ON b.dag_run_id = r.id AND b.task_id = t.task_id
WHERE t.max_active_tis_per_dagrun IS NOT NULL
UNION ALL
SELECT 'executor', e.name, e.parallelism, coalesce(b.n, 0)::int, (e.parallelism - coalesce(b.n, 0))::int,
       NULL, NULL, NULL, NULL, e.name
FROM executor e
LEFT JOIN by_executor b ON b.executor = e.name
WHERE e.parallelism IS NOT NULL;
