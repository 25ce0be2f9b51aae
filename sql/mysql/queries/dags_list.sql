-- result bool: is_paused is_active
SELECT d.dag_id, d.schedule, d.is_paused, d.is_active, d.max_active_runs, d.max_active_tasks, d.next_dagrun,
       (SELECT COUNT(*) FROM task t WHERE t.dag_id = d.dag_id AND t.is_active) AS tasks,
       (SELECT COUNT(*) FROM dag_run r WHERE r.dag_id = d.dag_id AND r.state IN ('queued', 'running')) AS active_runs,
       d.fileloc,
       CASE WHEN d.error IS NOT NULL THEN CONCAT(d.error_step, ': ', LEFT(d.error, 120)) END AS error
FROM dag d
ORDER BY d.is_active DESC, d.dag_id
