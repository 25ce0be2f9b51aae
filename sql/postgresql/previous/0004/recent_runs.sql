-- recent_runs: the 50 most recently created dag runs with their TIs counted by state.
CREATE VIEW recent_runs AS
SELECT r.dag_id, r.run_id, r.run_type, r.state, r.logical_date, r.created_at, r.start_date, r.end_date,
       count(ti.id)::int AS tis,
       count(ti.id) FILTER (WHERE ti.state = 'success')::int AS success,
       count(ti.id) FILTER (WHERE ti.state IN ('failed', 'upstream_failed'))::int AS failed,
       count(ti.id) FILTER (WHERE ti.state = 'skipped')::int AS skipped,
       count(ti.id) FILTER (WHERE ti.state IN ('scheduled', 'queued', 'running', 'deferred', 'up_for_retry', 'none'))::int AS unfinished
FROM (SELECT * FROM dag_run ORDER BY created_at DESC, id DESC LIMIT 50) r
LEFT JOIN task_instance ti ON ti.dag_run_id = r.id
GROUP BY r.id, r.dag_id, r.run_id, r.run_type, r.state, r.logical_date, r.created_at, r.start_date, r.end_date;
