-- queue_depth: TIs waiting or in flight per pool and queue.
CREATE VIEW queue_depth AS
SELECT ti.pool, ti.queue,
       count(*) FILTER (WHERE ti.state = 'scheduled')::int AS scheduled,
       count(*) FILTER (WHERE ti.state = 'queued')::int AS queued,
       count(*) FILTER (WHERE ti.state = 'running')::int AS running,
       count(*) FILTER (WHERE ti.state = 'deferred')::int AS deferred,
       count(*) FILTER (WHERE ti.state = 'up_for_retry')::int AS up_for_retry
FROM task_instance ti
WHERE ti.state IN ('scheduled', 'queued', 'running', 'deferred', 'up_for_retry')
GROUP BY ti.pool, ti.queue;
