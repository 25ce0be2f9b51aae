-- run_overview: every dag run with its TIs counted by state, its duration and the reason an
-- operator gave when it changed the run (`engine runs list` / `engine runs show` print it).
-- duration_s: end_date (or now, while it runs) minus start_date; NULL before it started.
CREATE VIEW run_overview AS
SELECT r.id AS dag_run_id, r.dag_id, r.run_id, r.run_type, r.state, r.logical_date, r.created_at,
       r.start_date, r.end_date,
       extract(epoch FROM coalesce(r.end_date, now()) - r.start_date)::double precision AS duration_s,
       count(ti.id)::int AS tis,
       count(ti.id) FILTER (WHERE ti.state = 'success')::int AS success,
       count(ti.id) FILTER (WHERE ti.state IN ('failed', 'upstream_failed'))::int AS failed,
       count(ti.id) FILTER (WHERE ti.state = 'skipped')::int AS skipped,
       count(ti.id) FILTER (WHERE ti.state IN ('none', 'scheduled', 'queued', 'running', 'restarting', 'deferred',
                                               'up_for_retry'))::int AS unfinished,
       r.state_reason AS reason
FROM dag_run r
LEFT JOIN task_instance ti ON ti.dag_run_id = r.id
GROUP BY r.id, r.dag_id, r.run_id, r.run_type, r.state, r.logical_date, r.created_at, r.start_date, r.end_date,
         r.state_reason;
