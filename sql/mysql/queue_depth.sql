-- queue_depth: TIs waiting or in flight per pool and queue.
-- MySQL: SUM(CASE ...) for FILTER, cast to SIGNED.
CREATE VIEW queue_depth AS
SELECT ti.pool, ti.queue,
       CAST(SUM(CASE WHEN ti.state = 'scheduled' THEN 1 ELSE 0 END) AS SIGNED) AS scheduled,
       CAST(SUM(CASE WHEN ti.state = 'queued' THEN 1 ELSE 0 END) AS SIGNED) AS queued,
       CAST(SUM(CASE WHEN ti.state = 'running' THEN 1 ELSE 0 END) AS SIGNED) AS running,
       CAST(SUM(CASE WHEN ti.state = 'deferred' THEN 1 ELSE 0 END) AS SIGNED) AS deferred,
       CAST(SUM(CASE WHEN ti.state = 'up_for_retry' THEN 1 ELSE 0 END) AS SIGNED) AS up_for_retry
FROM task_instance ti
WHERE ti.state IN ('scheduled', 'queued', 'running', 'deferred', 'up_for_retry')
GROUP BY ti.pool, ti.queue
