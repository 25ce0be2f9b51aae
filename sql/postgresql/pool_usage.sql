-- pool_usage: one row per pool, counted the way queue_tis_v1 counts (sum of pool_slots of
-- queued and running TIs, plus deferred ones when the pool includes deferred).
-- open_slots is NULL for an unlimited pool (slots = -1).
CREATE VIEW pool_usage AS
SELECT p.name AS pool,
       p.slots,
       p.include_deferred,
       coalesce(sum(ti.pool_slots) FILTER (WHERE ti.state = 'queued'), 0)::int AS queued_slots,
       coalesce(sum(ti.pool_slots) FILTER (WHERE ti.state = 'running'), 0)::int AS running_slots,
       coalesce(sum(ti.pool_slots) FILTER (WHERE ti.state = 'deferred'), 0)::int AS deferred_slots,
       coalesce(sum(ti.pool_slots) FILTER (WHERE ti.state IN ('queued', 'running')
                                             OR (ti.state = 'deferred' AND p.include_deferred)), 0)::int AS used_slots,
       CASE WHEN p.slots < 0 THEN NULL
            ELSE p.slots - coalesce(sum(ti.pool_slots) FILTER (WHERE ti.state IN ('queued', 'running')
                                             OR (ti.state = 'deferred' AND p.include_deferred)), 0)::int
       END AS open_slots,
       (SELECT count(*) FROM task_instance s WHERE s.pool = p.name AND s.state = 'scheduled')::int AS scheduled_tis
FROM pool p
LEFT JOIN task_instance ti ON ti.pool = p.name AND ti.state IN ('queued', 'running', 'deferred')
GROUP BY p.name, p.slots, p.include_deferred;
