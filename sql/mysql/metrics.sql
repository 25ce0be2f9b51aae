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
--   pending_tis {reason}          scheduled TIs by why they wait (view pending_counts, which
--                                 counts pending_reasons per group of TIs)
--   oldest_ti_age_seconds {state} age of the oldest scheduled (since last update) / queued TI
--   triggers_running              triggers a triggerer runs; triggers_unclaimed: nobody runs yet
--   ti_finish_last_hour {state}   tries that ended in the last hour, by outcome
--   ti_start_last_hour            tries that started in the last hour
--   jobs_running {kind}           scheduler/worker/triggerer jobs in state running
--   dag_errors                    DAGs with a recorded error (view dag_errors)
--   deployment_draining           1 while the deployment drains
-- Cost (revision 0061): two reads of the scheduled TIs whatever the backlog, one of them grouped
-- first (pending_counts), then small tables: 1,000,000 scheduled TIs 7.4 s on MariaDB 10.11,
-- where the view of revision 0008 read them six times, three of them per TI through
-- pending_reasons (338 s). loadtests/bench_status.py measures it.
CREATE VIEW metrics AS
WITH u AS (  -- slots by pool, counted as the view pool_usage does (computed here, so that metrics
             -- survives a DROP of pool_usage; repair() reinstalls views dropped with a view they read)
    SELECT p.name AS pool,
           COALESCE(SUM(CASE WHEN ti.state = 'queued' THEN ti.pool_slots END), 0) AS queued_slots,
           COALESCE(SUM(CASE WHEN ti.state = 'running' THEN ti.pool_slots END), 0) AS running_slots,
           COALESCE(SUM(CASE WHEN ti.state = 'deferred' THEN ti.pool_slots END), 0) AS deferred_slots,
           CASE WHEN p.slots < 0 THEN NULL
                ELSE p.slots - COALESCE(SUM(CASE WHEN ti.state IN ('queued', 'running')
                                                   OR (ti.state = 'deferred' AND p.include_deferred)
                                                 THEN ti.pool_slots END), 0) END AS open_slots
    FROM pool p
    LEFT JOIN task_instance ti ON ti.pool = p.name AND ti.state IN ('queued', 'running', 'deferred')
    GROUP BY p.name, p.slots, p.include_deferred
)
SELECT 'pool_open_slots' AS metric, u.pool AS pool, CAST(NULL AS CHAR) AS queue, CAST(NULL AS CHAR) AS state,
       CAST(NULL AS CHAR) AS reason, CAST(NULL AS CHAR) AS kind, CAST(u.open_slots AS DOUBLE) AS value
FROM u WHERE u.open_slots IS NOT NULL
UNION ALL SELECT 'pool_queued_slots', u.pool, NULL, NULL, NULL, NULL, u.queued_slots FROM u
UNION ALL SELECT 'pool_running_slots', u.pool, NULL, NULL, NULL, NULL, u.running_slots FROM u
UNION ALL SELECT 'pool_deferred_slots', u.pool, NULL, NULL, NULL, NULL, u.deferred_slots FROM u
-- The samples read from the TIs (task_instances, pool_scheduled_slots, oldest_ti_age_seconds)
-- and from pending_counts (pool_starving_tasks, scheduler_tasks_starving, pending_tis): each
-- source once, joined to the list of its metrics and grouped. (MariaDB computes a CTE again for
-- every reference: reading each from a CTE cost 25 s at 1,000,000 scheduled TIs, against 8 s.)
-- The zero rows (every pool, and one row with no pool) give each metric the rows it had when it
-- was a query of its own: a pool without TIs, a deployment without any.
UNION ALL SELECT k.metric,
                 CASE WHEN k.metric <> 'oldest_ti_age_seconds' THEN y.pool END,
                 CASE WHEN k.metric = 'task_instances' THEN y.queue END,
                 CASE WHEN k.metric = 'task_instances' THEN y.state ELSE k.state END,
                 NULL, NULL,
                 CASE k.metric
                     WHEN 'task_instances' THEN SUM(y.n)
                     WHEN 'pool_scheduled_slots' THEN COALESCE(SUM(CASE WHEN y.state = 'scheduled' THEN y.slots END), 0)
                     ELSE COALESCE(TIMESTAMPDIFF(MICROSECOND,
                                                 MIN(CASE WHEN y.state = k.state AND k.state = 'scheduled' THEN y.oldest_update
                                                          WHEN y.state = k.state THEN y.oldest_queued END),
                                                 UTC_TIMESTAMP(6)) / 1e6, 0)
                 END
          FROM (SELECT 1 AS counted, ti.pool, ti.queue, ti.state, COUNT(*) AS n, SUM(ti.pool_slots) AS slots,
                       MIN(COALESCE(ti.updated_at, ti.run_after)) AS oldest_update, MIN(ti.queued_at) AS oldest_queued
                FROM task_instance ti WHERE ti.state IN ('scheduled', 'queued', 'running', 'deferred', 'up_for_retry')
                GROUP BY ti.pool, ti.queue, ti.state
                UNION ALL SELECT 0, p.name, NULL, NULL, 0, 0, NULL, NULL FROM pool p
                UNION ALL SELECT 0, NULL, NULL, NULL, 0, 0, NULL, NULL) y
          JOIN (SELECT 'task_instances' AS metric, CAST(NULL AS CHAR) AS state
                UNION ALL SELECT 'pool_scheduled_slots', NULL
                UNION ALL SELECT 'oldest_ti_age_seconds', 'scheduled'
                UNION ALL SELECT 'oldest_ti_age_seconds', 'queued') k
            ON (k.metric = 'task_instances' AND y.counted = 1)
            OR (k.metric = 'pool_scheduled_slots' AND y.pool IN (SELECT p.name FROM pool p))
            OR k.metric = 'oldest_ti_age_seconds'
          GROUP BY k.metric, k.state, CASE WHEN k.metric <> 'oldest_ti_age_seconds' THEN y.pool END,
                   CASE WHEN k.metric = 'task_instances' THEN y.queue END,
                   CASE WHEN k.metric = 'task_instances' THEN y.state END
UNION ALL SELECT k.metric,
                 CASE WHEN k.metric = 'pool_starving_tasks' THEN x.pool END,
                 NULL, NULL,
                 CASE WHEN k.metric = 'pending_tis' THEN x.reason END,
                 NULL,
                 COALESCE(SUM(CASE WHEN x.counted = 1 AND (k.metric = 'pending_tis'
                                                            OR x.reason IN ('pool full', 'pool closed', 'pool too small'))
                                   THEN x.tis END), 0)
          FROM (SELECT 1 AS counted, c.pool, c.reason, c.tis FROM pending_counts c
                UNION ALL SELECT 0, p.name, NULL, 0 FROM pool p
                UNION ALL SELECT 0, NULL, NULL, 0) x
          JOIN (SELECT 'pool_starving_tasks' AS metric UNION ALL SELECT 'scheduler_tasks_starving'
                UNION ALL SELECT 'pending_tis') k
            ON (k.metric = 'pool_starving_tasks' AND x.pool IN (SELECT p.name FROM pool p))
            OR k.metric = 'scheduler_tasks_starving'
            OR (k.metric = 'pending_tis' AND x.counted = 1)
          GROUP BY k.metric, CASE WHEN k.metric = 'pool_starving_tasks' THEN x.pool END,
                   CASE WHEN k.metric = 'pending_tis' THEN x.reason END
UNION ALL SELECT 'triggers_running', NULL, NULL, NULL, NULL, NULL, COUNT(*)
          FROM `trigger` g WHERE g.fired_at IS NULL AND g.triggerer_job_id IS NOT NULL
UNION ALL SELECT 'triggers_unclaimed', NULL, NULL, NULL, NULL, NULL, COUNT(*)
          FROM `trigger` g WHERE g.fired_at IS NULL AND g.triggerer_job_id IS NULL
UNION ALL SELECT 'ti_finish_last_hour', NULL, NULL, h.state, NULL, NULL, COUNT(*)
          FROM task_instance_history h WHERE h.end_date > UTC_TIMESTAMP(6) - INTERVAL 1 HOUR GROUP BY h.state
UNION ALL SELECT 'ti_start_last_hour', NULL, NULL, NULL, NULL, NULL,
                 (SELECT COUNT(*) FROM task_instance_history h WHERE h.start_date > UTC_TIMESTAMP(6) - INTERVAL 1 HOUR)
                 + (SELECT COUNT(*) FROM task_instance ti WHERE ti.state IN ('running', 'deferred')
                                                          AND ti.start_date > UTC_TIMESTAMP(6) - INTERVAL 1 HOUR)
UNION ALL SELECT 'jobs_running', NULL, NULL, NULL, NULL, k.kind,
                 (SELECT COUNT(*) FROM job j WHERE j.state = 'running' AND j.kind = k.kind)
          FROM (SELECT 'scheduler' AS kind UNION ALL SELECT 'worker' UNION ALL SELECT 'triggerer') k
UNION ALL SELECT 'dag_errors', NULL, NULL, NULL, NULL, NULL, COUNT(*) FROM dag d WHERE d.error IS NOT NULL
UNION ALL SELECT 'deployment_draining', NULL, NULL, NULL, NULL, NULL,
                 COALESCE((SELECT CASE WHEN dp.is_draining THEN 1 ELSE 0 END FROM deployment dp WHERE dp.id = 1), 0);
