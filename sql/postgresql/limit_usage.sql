-- limit_usage: every limited partition of DESIGN section 4 with its cap, what is used and what
-- is free, counted exactly as queue_tis_v1 counts (it reads this view). One row per
--   pool      key = pool name        used = sum(pool_slots) of queued + running TIs, plus deferred
--                                           ones when the pool has include_deferred; slots -1 = no row
--   run       key = dag_run id       used = queued + running TIs of the run (DAG max_active_tasks)
--   task      key = dag_id.task_id   used = queued + running TIs of the task in all runs
--   task_run  key = run_id.task_id   used = queued + running TIs of the task in one run
--   executor  key = executor name    used = queued + running TIs of the executor (parallelism)
-- Partitions without a limit (NULL) have no row: unlimited.
CREATE VIEW limit_usage AS
SELECT 'pool'::text AS kind, p.name AS key, p.slots AS cap,
       coalesce(sum(ti.pool_slots), 0)::int AS used,
       (p.slots - coalesce(sum(ti.pool_slots), 0))::int AS free
FROM pool p
LEFT JOIN task_instance ti ON ti.pool = p.name
     AND (ti.state IN ('queued', 'running') OR (ti.state = 'deferred' AND p.include_deferred))
WHERE p.slots >= 0
GROUP BY p.name, p.slots
UNION ALL
SELECT 'run', r.id::text, d.max_active_tasks, count(ti.id)::int, (d.max_active_tasks - count(ti.id))::int
FROM dag_run r
JOIN dag d ON d.dag_id = r.dag_id AND d.max_active_tasks IS NOT NULL
LEFT JOIN task_instance ti ON ti.dag_run_id = r.id AND ti.state IN ('queued', 'running')
WHERE r.state = 'running'
GROUP BY r.id, d.max_active_tasks
UNION ALL
SELECT 'task', t.dag_id || '.' || t.task_id, t.max_active_tis_per_dag, count(ti.id)::int,
       (t.max_active_tis_per_dag - count(ti.id))::int
FROM task t
LEFT JOIN task_instance ti ON ti.dag_id = t.dag_id AND ti.task_id = t.task_id AND ti.state IN ('queued', 'running')
WHERE t.max_active_tis_per_dag IS NOT NULL
GROUP BY t.dag_id, t.task_id, t.max_active_tis_per_dag
UNION ALL
SELECT 'task_run', r.id || '.' || t.task_id, t.max_active_tis_per_dagrun, count(ti.id)::int,
       (t.max_active_tis_per_dagrun - count(ti.id))::int
FROM task t
JOIN dag_run r ON r.dag_id = t.dag_id AND r.state = 'running'
LEFT JOIN task_instance ti ON ti.dag_run_id = r.id AND ti.task_id = t.task_id AND ti.state IN ('queued', 'running')
WHERE t.max_active_tis_per_dagrun IS NOT NULL
GROUP BY r.id, t.task_id, t.max_active_tis_per_dagrun
UNION ALL
SELECT 'executor', e.name, e.parallelism, count(ti.id)::int, (e.parallelism - count(ti.id))::int
FROM executor e
LEFT JOIN task_instance ti ON ti.executor = e.name AND ti.state IN ('queued', 'running')
WHERE e.parallelism IS NOT NULL
GROUP BY e.name, e.parallelism;
