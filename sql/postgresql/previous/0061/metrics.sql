-- metrics: every count the database knows, one row per sample, for `engine metrics` and the
-- Prometheus endpoint of `engine scheduler --metrics-port` (engine/metrics.py adds the prefix
-- engine_ and turns the non-NULL label columns into labels). Names follow Airflow's metrics
-- where one exists (pool.open_slots -> pool_open_slots, scheduler.tasks.starving ->
-- scheduler_tasks_starving, triggers.running -> triggers_running): docs/operations.md lists them.
--   pool_open_slots / pool_queued_slots / pool_running_slots / pool_deferred_slots /
--   pool_scheduled_slots {pool}   slots by pool (open: NULL for an unlimited pool, left out)
--   pool_starving_tasks {pool}    scheduled TIs waiting because their pool is full, closed or too small
--   scheduler_tasks_starving      the same, all pools
--   task_instances {pool,queue,state}  TIs in scheduled, queued, running, deferred, up_for_retry
--   pending_tis {reason}          scheduled TIs by why they wait (view pending_reasons)
--   oldest_ti_age_seconds {state} age of the oldest scheduled (since last update) / queued TI
--   triggers_running              triggers a triggerer runs; triggers_unclaimed: nobody runs yet
--   ti_finish_last_hour {state}   tries that ended in the last hour, by outcome
--   ti_start_last_hour            tries that started in the last hour
--   jobs_running {kind}           scheduler/worker/triggerer jobs in state running
--   dag_errors                    DAGs with a recorded error (view dag_errors)
--   deployment_draining           1 while the deployment drains
CREATE VIEW metrics AS
WITH u AS (  -- slots by pool, counted as the view pool_usage does (computed here, so that metrics
             -- survives a DROP of pool_usage; repair() reinstalls views dropped with a view they read)
    SELECT p.name AS pool,
           coalesce(sum(ti.pool_slots) FILTER (WHERE ti.state = 'queued'), 0) AS queued_slots,
           coalesce(sum(ti.pool_slots) FILTER (WHERE ti.state = 'running'), 0) AS running_slots,
           coalesce(sum(ti.pool_slots) FILTER (WHERE ti.state = 'deferred'), 0) AS deferred_slots,
           CASE WHEN p.slots < 0 THEN NULL
                ELSE p.slots - coalesce(sum(ti.pool_slots) FILTER (WHERE ti.state IN ('queued', 'running')
                                                 OR (ti.state = 'deferred' AND p.include_deferred)), 0) END AS open_slots
    FROM pool p
    LEFT JOIN task_instance ti ON ti.pool = p.name AND ti.state IN ('queued', 'running', 'deferred')
    GROUP BY p.name, p.slots, p.include_deferred
)
SELECT 'pool_open_slots'::text AS metric, u.pool::text AS pool, NULL::text AS queue, NULL::text AS state,
       NULL::text AS reason, NULL::text AS kind, u.open_slots::double precision AS value
FROM u WHERE u.open_slots IS NOT NULL
UNION ALL SELECT 'pool_queued_slots', u.pool, NULL, NULL, NULL, NULL, u.queued_slots FROM u
UNION ALL SELECT 'pool_running_slots', u.pool, NULL, NULL, NULL, NULL, u.running_slots FROM u
UNION ALL SELECT 'pool_deferred_slots', u.pool, NULL, NULL, NULL, NULL, u.deferred_slots FROM u
UNION ALL SELECT 'pool_scheduled_slots', u.pool, NULL, NULL, NULL, NULL,
                 (SELECT coalesce(sum(s.pool_slots), 0) FROM task_instance s WHERE s.pool = u.pool AND s.state = 'scheduled')
          FROM u
UNION ALL SELECT 'pool_starving_tasks', p.name, NULL, NULL, NULL, NULL,
                 (SELECT count(*) FROM pending_reasons r WHERE r.pool = p.name AND r.reason IN ('pool full', 'pool closed', 'pool too small'))
          FROM pool p
UNION ALL SELECT 'scheduler_tasks_starving', NULL, NULL, NULL, NULL, NULL, count(*)
          FROM pending_reasons r WHERE r.reason IN ('pool full', 'pool closed', 'pool too small')
UNION ALL SELECT 'task_instances', ti.pool, ti.queue, ti.state, NULL, NULL, count(*)
          FROM task_instance ti WHERE ti.state IN ('scheduled', 'queued', 'running', 'deferred', 'up_for_retry')
          GROUP BY ti.pool, ti.queue, ti.state
UNION ALL SELECT 'pending_tis', NULL, NULL, NULL, r.reason, NULL, count(*) FROM pending_reasons r GROUP BY r.reason
UNION ALL SELECT 'oldest_ti_age_seconds', NULL, NULL, 'scheduled', NULL, NULL,
                 coalesce(extract(epoch FROM now() - min(coalesce(ti.updated_at, ti.run_after))), 0)
          FROM task_instance ti WHERE ti.state = 'scheduled'
UNION ALL SELECT 'oldest_ti_age_seconds', NULL, NULL, 'queued', NULL, NULL,
                 coalesce(extract(epoch FROM now() - min(ti.queued_at)), 0)
          FROM task_instance ti WHERE ti.state = 'queued'
UNION ALL SELECT 'triggers_running', NULL, NULL, NULL, NULL, NULL, count(*)
          FROM trigger g WHERE g.fired_at IS NULL AND g.triggerer_job_id IS NOT NULL
UNION ALL SELECT 'triggers_unclaimed', NULL, NULL, NULL, NULL, NULL, count(*)
          FROM trigger g WHERE g.fired_at IS NULL AND g.triggerer_job_id IS NULL
UNION ALL SELECT 'ti_finish_last_hour', NULL, NULL, h.state, NULL, NULL, count(*)
          FROM task_instance_history h WHERE h.end_date > now() - interval '1 hour' GROUP BY h.state
UNION ALL SELECT 'ti_start_last_hour', NULL, NULL, NULL, NULL, NULL,
                 (SELECT count(*) FROM task_instance_history h WHERE h.start_date > now() - interval '1 hour')
                 + (SELECT count(*) FROM task_instance ti WHERE ti.state IN ('running', 'deferred')
                                                          AND ti.start_date > now() - interval '1 hour')
UNION ALL SELECT 'jobs_running', NULL, NULL, NULL, NULL, k.kind,
                 (SELECT count(*) FROM job j WHERE j.state = 'running' AND j.kind = k.kind)
          FROM (VALUES ('scheduler'), ('worker'), ('triggerer')) k(kind)
UNION ALL SELECT 'dag_errors', NULL, NULL, NULL, NULL, NULL, count(*) FROM dag d WHERE d.error IS NOT NULL
UNION ALL SELECT 'deployment_draining', NULL, NULL, NULL, NULL, NULL,
                 coalesce((SELECT CASE WHEN dp.is_draining THEN 1 ELSE 0 END FROM deployment dp WHERE dp.id = 1), 0);
