-- drain_status: what is still in flight in the DAGs that drain (dag.is_draining, or every DAG
-- while deployment.is_draining), one row per DAG with something left. No row: drained.
--   queued    admitted before the drain (or a resume), waiting for a worker
--   running   a worker runs it
--   deferred  waiting for its trigger
--   resuming  its trigger fired; `scheduled` until a slot is free (pool without include_deferred)
-- Scheduled TIs that are not resumes, and retries, are not in flight: they wait for the end of
-- the drain (pending_reasons says 'dag draining' / 'deployment draining').
CREATE VIEW drain_status AS
SELECT ti.dag_id,
       count(*) FILTER (WHERE ti.state = 'queued')::int AS queued,
       count(*) FILTER (WHERE ti.state = 'running')::int AS running,
       count(*) FILTER (WHERE ti.state = 'deferred')::int AS deferred,
       count(*) FILTER (WHERE ti.state = 'scheduled')::int AS resuming
FROM task_instance ti
JOIN dag d ON d.dag_id = ti.dag_id
LEFT JOIN deployment dp ON dp.id = 1
WHERE (d.is_draining OR coalesce(dp.is_draining, false))
  AND (ti.state IN ('queued', 'running', 'deferred') OR (ti.state = 'scheduled' AND ti.next_method IS NOT NULL))
GROUP BY ti.dag_id;
