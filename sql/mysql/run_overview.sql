-- run_overview: every dag run with its TIs counted by state, its duration and the reason an
-- operator gave when it changed the run (`engine runs list` / `engine runs show` print it).
-- duration_s: end_date (or now, while it runs) minus start_date; NULL before it started.
CREATE VIEW run_overview AS
SELECT r.id AS dag_run_id, r.dag_id, r.run_id, r.run_type, r.state, r.logical_date, r.created_at,
       r.start_date, r.end_date,
       TIMESTAMPDIFF(MICROSECOND, r.start_date, COALESCE(r.end_date, UTC_TIMESTAMP(6))) / 1000000.0 AS duration_s,
       CAST(COUNT(ti.id) AS SIGNED) AS tis,
       CAST(SUM(CASE WHEN ti.state = 'success' THEN 1 ELSE 0 END) AS SIGNED) AS success,
       CAST(SUM(CASE WHEN ti.state IN ('failed', 'upstream_failed') THEN 1 ELSE 0 END) AS SIGNED) AS failed,
       CAST(SUM(CASE WHEN ti.state = 'skipped' THEN 1 ELSE 0 END) AS SIGNED) AS skipped,
       CAST(SUM(CASE WHEN ti.state IN ('none', 'scheduled', 'queued', 'running', 'restarting', 'preempting', 'deferred',
                                       'up_for_retry') THEN 1 ELSE 0 END) AS SIGNED) AS unfinished,
       r.state_reason AS reason
FROM dag_run r
LEFT JOIN task_instance ti ON ti.dag_run_id = r.id
GROUP BY r.id, r.dag_id, r.run_id, r.run_type, r.state, r.logical_date, r.created_at, r.start_date, r.end_date,
         r.state_reason
