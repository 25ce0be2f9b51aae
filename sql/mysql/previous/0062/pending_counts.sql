-- pending_counts: how many scheduled TIs wait for each reason, by pool (pool, reason, tis): the
-- counts of `SELECT pool, reason, COUNT(*) FROM pending_reasons GROUP BY pool, reason`, computed
-- per group of TIs instead of per TI, for `engine status` and the metrics view. The reasons are
-- pending_reasons' (read its header), tested equal to it (tests/helpers.py pending_counts_agree).
--
-- Why a view of its own: a TI's reason depends only on its pool, run, DAG, task, width,
-- executor, whether it resumes (next_method), whether it holds a reservation and how many
-- preempted TIs it waits for. So the scheduled TIs are first counted by those (one pass,
-- ~20,000 groups for 1,000,000 TIs in the benchmark's world), and the limits are read per group:
-- 0.6 s for 1,000,000 scheduled TIs on PostgreSQL 15, where pending_reasons reads them per TI
-- (2.5 s; MariaDB 10.11: 5.5 s against 114 s). Keep the CASE below the same as pending_reasons'.
CREATE VIEW pending_counts AS
SELECT g.pool,
       CASE
           WHEN NOT d.is_active THEN 'dag removed'
           WHEN t.is_active IS NOT TRUE THEN 'task removed'
           WHEN d.is_paused AND g.fresh THEN 'dag paused'
           WHEN COALESCE(dp.is_draining, FALSE) AND g.fresh THEN 'deployment draining'
           WHEN d.is_draining AND g.fresh THEN 'dag draining'
           WHEN r.state <> 'running' THEN 'run not running'
           WHEN p.name IS NULL THEN 'unknown pool'
           WHEN e.name IS NULL THEN 'unknown executor'
           WHEN lp.cap = 0 THEN 'pool closed'
           WHEN lp.cap IS NOT NULL AND g.pool_slots > lp.cap THEN 'pool too small'
           WHEN g.preempted > 0 THEN CONCAT('waiting for ', g.preempted, ' preempted TI(s) to stop')
           WHEN g.reserved AND lp.free < g.pool_slots THEN 'slots reserved for it'
           WHEN lp.free < g.pool_slots THEN 'pool full'
           WHEN NOT g.reserved AND lp.free - ro.slots < g.pool_slots
                THEN CONCAT('slots reserved for ', ro.n, ' other TI(s)')
           WHEN lr.free < 1 THEN 'run at max_active_tasks'
           WHEN lt.free < 1 THEN 'task at max_active_tis_per_dag'
           WHEN lm.free < 1 THEN 'task at max_active_tis_per_dagrun'
           WHEN le.free < 1 THEN 'executor at parallelism'
           ELSE 'runnable'
       END AS reason,
       CAST(SUM(g.n) AS SIGNED) AS tis
FROM (
    -- (A TI with a reservation, or with preempted TIs stopping for it, is rare: the two joins
    -- below are probes of small tables, and such a TI's group holds only its own kind.)
    SELECT ti.pool, ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool_slots, ti.executor,
           ti.next_method IS NULL AS fresh, rs.ti_id IS NOT NULL AS reserved, pv.n AS preempted,
           COUNT(*) AS n
    FROM task_instance ti
    LEFT JOIN pool_reservation rs ON rs.ti_id = ti.id
    LEFT JOIN (SELECT v.preempted_for, COUNT(*) AS n FROM task_instance v WHERE v.state = 'preempting'
               GROUP BY v.preempted_for) pv ON pv.preempted_for = ti.id
    WHERE ti.state = 'scheduled'
    GROUP BY ti.pool, ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool_slots, ti.executor, fresh, reserved, preempted
) g
JOIN dag_run r ON r.id = g.dag_run_id
JOIN dag d ON d.dag_id = g.dag_id
LEFT JOIN task t ON t.dag_id = g.dag_id AND t.task_id = g.task_id
LEFT JOIN pool p ON p.name = g.pool
LEFT JOIN executor e ON e.name = g.executor
LEFT JOIN deployment dp ON dp.id = 1
LEFT JOIN limit_usage lp ON lp.kind = 'pool' AND lp.pool = g.pool
LEFT JOIN limit_usage lr ON lr.kind = 'run' AND lr.dag_run_id = g.dag_run_id
LEFT JOIN limit_usage lt ON lt.kind = 'task' AND lt.dag_id = g.dag_id AND lt.task_id = g.task_id
LEFT JOIN limit_usage lm ON lm.kind = 'task_run' AND lm.dag_run_id = g.dag_run_id AND lm.task_id = g.task_id
LEFT JOIN limit_usage le ON le.kind = 'executor' AND le.executor = g.executor
LEFT JOIN (SELECT x.pool, COUNT(*) AS n, SUM(x.slots) AS slots FROM pool_reservation x GROUP BY x.pool) ro
       ON ro.pool = g.pool
GROUP BY g.pool, reason;
