-- Dag runs by id with their TIs counted by state (for `engine demo`); removed TIs are done, not unfinished.
-- MySQL: ids arrives as a JSON array; SUM(CASE ...) for FILTER.
SELECT r.id, r.dag_id, r.run_id, r.state,
       CAST(SUM(CASE WHEN ti.state = 'success' THEN 1 ELSE 0 END) AS SIGNED) AS success,
       CAST(SUM(CASE WHEN ti.state IN ('failed', 'upstream_failed') THEN 1 ELSE 0 END) AS SIGNED) AS failed,
       CAST(SUM(CASE WHEN ti.state = 'skipped' THEN 1 ELSE 0 END) AS SIGNED) AS skipped,
       CAST(SUM(CASE WHEN ti.state NOT IN ('success', 'failed', 'upstream_failed', 'skipped', 'removed') THEN 1 ELSE 0 END)
            AS SIGNED) AS unfinished,
       COUNT(ti.id) AS tis
FROM dag_run r LEFT JOIN task_instance ti ON ti.dag_run_id = r.id
WHERE r.id IN (SELECT x.id FROM JSON_TABLE(:ids, '$[*]' COLUMNS (id BIGINT PATH '$')) x)
GROUP BY r.id, r.dag_id, r.run_id, r.state
ORDER BY r.id
