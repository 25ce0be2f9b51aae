-- `engine status --check`: one row per problem (none: healthy), each a line naming the fix.
--   no_scheduler     no scheduler job heartbeated (or a tick ended) within :threshold seconds
--   no_worker        a queue holds queued TIs of the database queue (executor 'default') and no live
--                    worker claims from it (job.queues); other executors' TIs wait in their broker
--   no_dispatcher    TIs of another executor (celery) are queued and no live `engine dispatcher`
--                    of that executor (a job of kind dispatcher whose job.queues names it) sends them
--   queued_too_long  the oldest queued TI has waited more than :max_queued_age seconds
--   draining         the deployment is draining (`engine drain`): nothing new starts
SELECT 'no_scheduler' AS problem,
       CONCAT('no live scheduler: no scheduler job heartbeated in the last ', :threshold, ' s; start `engine scheduler` ',
              '(or check the tick timer)') AS detail
FROM (SELECT 1 AS one) x
WHERE NOT EXISTS (SELECT 1 FROM job j WHERE j.kind = 'scheduler'
                    AND (j.state = 'running' AND j.latest_heartbeat > UTC_TIMESTAMP(6) - INTERVAL ROUND(:threshold * 1000000) MICROSECOND
                         OR j.end_date > UTC_TIMESTAMP(6) - INTERVAL ROUND(:threshold * 1000000) MICROSECOND))
UNION ALL
SELECT 'no_worker',
       CONCAT('queue ', q.queue, ' has ', q.n, ' queued TI(s) and no live worker claims from it; start `engine worker --queues ',
              q.queue, '`')
FROM (SELECT ti.queue, COUNT(*) AS n FROM task_instance ti WHERE ti.state = 'queued' AND ti.executor = 'default'
      GROUP BY ti.queue) q
WHERE NOT EXISTS (SELECT 1 FROM job j WHERE j.kind = 'worker' AND j.state = 'running'
                    AND j.latest_heartbeat > UTC_TIMESTAMP(6) - INTERVAL ROUND(:threshold * 1000000) MICROSECOND
                    AND (j.queues IS NULL OR FIND_IN_SET(q.queue, j.queues) > 0))
UNION ALL
SELECT 'no_dispatcher',
       CONCAT('executor ', q.executor, ' has ', q.n, ' queued TI(s) and no live dispatcher sends them; ',
              'start `engine dispatcher --executor ', q.executor, '`')
FROM (SELECT ti.executor, COUNT(*) AS n FROM task_instance ti WHERE ti.state = 'queued' AND ti.executor <> 'default'
      GROUP BY ti.executor) q
WHERE NOT EXISTS (SELECT 1 FROM job j WHERE j.kind = 'dispatcher' AND j.state = 'running'
                    AND j.latest_heartbeat > UTC_TIMESTAMP(6) - INTERVAL ROUND(:threshold * 1000000) MICROSECOND
                    AND j.queues = q.executor)
UNION ALL
SELECT 'queued_too_long',
       CONCAT('the oldest queued TI (id ', ti.id, ', ', ti.dag_id, '.', ti.task_id, ') has waited ',
              ROUND(TIMESTAMPDIFF(MICROSECOND, ti.queued_at, UTC_TIMESTAMP(6)) / 1e6), ' s, more than ', :max_queued_age,
              ' s; add workers for queue ', ti.queue)
FROM (SELECT t.id, t.dag_id, t.task_id, t.queue, t.queued_at FROM task_instance t WHERE t.state = 'queued'
      ORDER BY t.queued_at LIMIT 1) ti
WHERE ti.queued_at < UTC_TIMESTAMP(6) - INTERVAL ROUND(:max_queued_age * 1000000) MICROSECOND
UNION ALL
SELECT 'draining', CONCAT('the deployment is draining since ', dp.drain_started_at, ': nothing new starts; `engine undrain` ends it')
FROM deployment dp WHERE dp.id = 1 AND dp.is_draining
