-- pending_reasons: why each scheduled TI is not queued yet — the first limit, in the order
-- queue_tis_v1 checks them, that is full for it, from the same counts (limit_usage).
--   dag paused | deployment draining | dag draining (none of the three holds a resume back:
--     a TI whose trigger fired, next_method set, is queued whatever its DAG's state)
--   | run not running | pool too small (pool_slots > slots: never fits)
--   | pool full | run at max_active_tasks | task at max_active_tis_per_dag
--   | task at max_active_tis_per_dagrun | executor at parallelism
--   | runnable: no limit is full; the next scheduler pass queues it unless higher-priority
--     work takes the room first (or max_tis per pass was reached).
CREATE VIEW pending_reasons AS
SELECT ti.id AS ti_id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.priority_weight,
       ti.pool, ti.pool_slots, lp.free AS pool_free,
       CASE
           WHEN d.is_paused AND ti.next_method IS NULL THEN 'dag paused'
           WHEN coalesce(dp.is_draining, false) AND ti.next_method IS NULL THEN 'deployment draining'
           WHEN d.is_draining AND ti.next_method IS NULL THEN 'dag draining'
           WHEN r.state <> 'running' THEN 'run not running'
           WHEN lp.cap IS NOT NULL AND ti.pool_slots > lp.cap THEN 'pool too small'
           WHEN lp.free < ti.pool_slots THEN 'pool full'
           WHEN lr.free < 1 THEN 'run at max_active_tasks'
           WHEN lt.free < 1 THEN 'task at max_active_tis_per_dag'
           WHEN lm.free < 1 THEN 'task at max_active_tis_per_dagrun'
           WHEN le.free < 1 THEN 'executor at parallelism'
           ELSE 'runnable'
       END AS reason
FROM task_instance ti
JOIN dag_run r ON r.id = ti.dag_run_id
JOIN dag d ON d.dag_id = ti.dag_id
LEFT JOIN deployment dp ON dp.id = 1
LEFT JOIN limit_usage lp ON lp.kind = 'pool' AND lp.key = ti.pool
LEFT JOIN limit_usage lr ON lr.kind = 'run' AND lr.key = ti.dag_run_id::text
LEFT JOIN limit_usage lt ON lt.kind = 'task' AND lt.key = ti.dag_id || '.' || ti.task_id
LEFT JOIN limit_usage lm ON lm.kind = 'task_run' AND lm.key = ti.dag_run_id || '.' || ti.task_id
LEFT JOIN limit_usage le ON le.kind = 'executor' AND le.key = ti.executor
WHERE ti.state = 'scheduled';
