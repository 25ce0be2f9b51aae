-- Partitions where the usage counters differ from a recount of task_instance (none: in step).
SELECT kind, dag_run_id, dag_id, task_id, pool, executor, counted, recounted FROM usage_drift
ORDER BY kind, dag_run_id, dag_id, task_id, pool, executor
