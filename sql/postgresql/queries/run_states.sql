-- Dag runs by id with their TIs counted by state (for `engine demo`); removed TIs are done, not unfinished.
SELECT r.id, r.dag_id, r.run_id, r.state,
       count(ti.id) FILTER (WHERE ti.state = 'success') AS success,
       count(ti.id) FILTER (WHERE ti.state IN ('failed', 'upstream_failed')) AS failed,
       count(ti.id) FILTER (WHERE ti.state = 'skipped') AS skipped,
       count(ti.id) FILTER (WHERE ti.state NOT IN ('success', 'failed', 'upstream_failed', 'skipped', 'removed')) AS unfinished,
       count(ti.id) AS tis
FROM dag_run r LEFT JOIN task_instance ti ON ti.dag_run_id = r.id
WHERE r.id = ANY (CAST(:ids AS bigint[]))
GROUP BY r.id, r.dag_id, r.run_id, r.state
ORDER BY r.id
