-- pool_usage: one row per pool, counted the way queue_tis_v1 counts (sum of pool_slots of
-- queued and running TIs, plus deferred ones when the pool includes deferred).
-- open_slots is NULL for an unlimited pool (slots = -1).
-- MySQL: SUM(CASE ...) for FILTER; sums cast to SIGNED (SUM returns DECIMAL).
CREATE VIEW pool_usage AS
SELECT p.name AS pool,
       p.slots,
       p.include_deferred,
       CAST(COALESCE(SUM(CASE WHEN ti.state = 'queued' THEN ti.pool_slots END), 0) AS SIGNED) AS queued_slots,
       CAST(COALESCE(SUM(CASE WHEN ti.state = 'running' THEN ti.pool_slots END), 0) AS SIGNED) AS running_slots,
       CAST(COALESCE(SUM(CASE WHEN ti.state = 'deferred' THEN ti.pool_slots END), 0) AS SIGNED) AS deferred_slots,
       CAST(COALESCE(SUM(CASE WHEN ti.state IN ('queued', 'running')
                                   OR (ti.state = 'deferred' AND p.include_deferred) THEN ti.pool_slots END), 0)
            AS SIGNED) AS used_slots,
       CASE WHEN p.slots < 0 THEN NULL
            ELSE CAST(p.slots - COALESCE(SUM(CASE WHEN ti.state IN ('queued', 'running')
                                                    OR (ti.state = 'deferred' AND p.include_deferred)
                                                  THEN ti.pool_slots END), 0) AS SIGNED)
       END AS open_slots,
       CAST((SELECT COUNT(*) FROM task_instance s WHERE s.pool = p.name AND s.state = 'scheduled') AS SIGNED)
           AS scheduled_tis
FROM pool p
LEFT JOIN task_instance ti ON ti.pool = p.name AND ti.state IN ('queued', 'running', 'deferred')
GROUP BY p.name, p.slots, p.include_deferred
