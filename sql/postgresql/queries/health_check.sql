-- `engine status --check`: one row per problem (none: healthy), each a line naming the fix.
--   no_scheduler     no scheduler job heartbeated (or a tick ended) within :threshold seconds
--   no_worker        a queue holds queued TIs of the database queue (executor 'default') and no live
--                    worker claims from it (job.queues); other executors' TIs wait in their broker
--   no_dispatcher    TIs of another executor (celery) are queued and no live `engine dispatcher`
--                    of that executor (a job of kind dispatcher whose job.queues names it) sends them
--   queued_too_long  the oldest queued TI has waited more than :max_queued_age seconds
--   draining         the deployment is draining (`engine drain`): nothing new starts
SELECT 'no_scheduler' AS problem,
       format('no live scheduler: no scheduler job heartbeated in the last %s s; start `engine scheduler` '
              '(or check the tick timer)', CAST(:threshold AS double precision)) AS detail
WHERE NOT EXISTS (SELECT 1 FROM job j WHERE j.kind = 'scheduler'
                    AND (j.state = 'running' AND j.latest_heartbeat > now() - make_interval(secs => CAST(:threshold AS double precision))
                         OR j.end_date > now() - make_interval(secs => CAST(:threshold AS double precision))))
UNION ALL
SELECT 'no_worker',
       format('queue %s has %s queued TI(s) and no live worker claims from it; start `engine worker --queues %s`',
              q.queue, q.n, q.queue)
FROM (SELECT ti.queue, count(*) AS n FROM task_instance ti WHERE ti.state = 'queued' AND ti.executor = 'default'
      GROUP BY ti.queue) q
WHERE NOT EXISTS (SELECT 1 FROM job j WHERE j.kind = 'worker' AND j.state = 'running'
                    AND j.latest_heartbeat > now() - make_interval(secs => CAST(:threshold AS double precision))
                    AND (j.queues IS NULL OR q.queue = ANY (string_to_array(j.queues, ','))))
UNION ALL
SELECT 'no_dispatcher',
       format('executor %s has %s queued TI(s) and no live dispatcher sends them; start `engine dispatcher --executor %s`',
              q.executor, q.n, q.executor)
FROM (SELECT ti.executor, count(*) AS n FROM task_instance ti WHERE ti.state = 'queued' AND ti.executor <> 'default'
      GROUP BY ti.executor) q
WHERE NOT EXISTS (SELECT 1 FROM job j WHERE j.kind = 'dispatcher' AND j.state = 'running'
                    AND j.latest_heartbeat > now() - make_interval(secs => CAST(:threshold AS double precision))
                    AND j.queues = q.executor)
UNION ALL
SELECT 'queued_too_long',
       format('the oldest queued TI (id %s, %s.%s) has waited %s s, more than %s s; add workers for queue %s',
              ti.id, ti.dag_id, ti.task_id, round(extract(epoch FROM now() - ti.queued_at)::numeric),
              CAST(:max_queued_age AS double precision), ti.queue)
FROM (SELECT * FROM task_instance t WHERE t.state = 'queued' ORDER BY t.queued_at LIMIT 1) ti
WHERE ti.queued_at < now() - make_interval(secs => CAST(:max_queued_age AS double precision))
UNION ALL
SELECT 'draining', format('the deployment is draining since %s: nothing new starts; `engine undrain` ends it',
                          dp.drain_started_at)
FROM deployment dp WHERE dp.id = 1 AND dp.is_draining
