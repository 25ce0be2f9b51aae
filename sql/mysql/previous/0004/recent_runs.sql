-- recent_runs: the 50 most recently created dag runs with their TIs counted by state.
-- MySQL: SUM(CASE ...) for FILTER, cast to SIGNED.
CREATE VIEW recent_runs AS
SELECT r.dag_id, r.run_id, r.run_type, r.state, r.logical_date, r.created_at, r.start_date, r.end_date,
       CAST(COUNT(ti.id) AS SIGNED) AS tis,
       CAST(SUM(CASE WHEN ti.state = 'success' THEN 1 ELSE 0 END) AS SIGNED) AS success,
       CAST(SUM(CASE WHEN ti.state IN ('failed', 'upstream_failed') THEN 1 ELSE 0 END) AS SIGNED) AS failed,
       CAST(SUM(CASE WHEN ti.state = 'skipped' THEN 1 ELSE 0 END) AS SIGNED) AS skipped,
       CAST(SUM(CASE WHEN ti.state IN ('scheduled', 'queued', 'running', 'deferred', 'up_for_retry', 'none')
                     THEN 1 ELSE 0 END) AS SIGNED) AS unfinished
FROM (SELECT * FROM dag_run ORDER BY created_at DESC, id DESC LIMIT 50) r
LEFT JOIN task_instance ti ON ti.dag_run_id = r.id
GROUP BY r.id, r.dag_id, r.run_id, r.run_type, r.state, r.logical_date, r.created_at, r.start_date, r.end_date
