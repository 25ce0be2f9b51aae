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
-- (2.5 s; MariaDB 10.11: 3.7 s since revision 0062, 5.5 s before, against 114 s). Keep the CASE
-- below the same as pending_reasons'.
-- MariaDB joins (since revision 0062): a join on a name alone (pool, executor; DAG and task)
-- to limit_usage was a block nested loop over all its rows for every row here (2.1 s of
-- this view's 2.1 s on a world of 50,000 scheduled TIs and 1,073 running), because the
-- key MariaDB builds on a materialized derived table holds at most 1,000 bytes and a
-- VARCHAR(250) utf8mb4 name takes 1,003. So those kinds are read as grouped derived tables
-- (GROUP BY keeps MariaDB from merging them back into this query; each partition is one row
-- anyway) that carry each name's first 100 characters, the key of the join; the whole names are
-- then compared with STRCMP(...) = 0, the same comparison as `=` (same collation, trailing
-- spaces alike) but not a key part, so the key stays small. Partitions keyed by a run's id were
-- never affected.
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
LEFT JOIN (SELECT LEFT(u.pool, 100) AS k, u.pool, MAX(u.cap) AS cap, MAX(u.free) AS free
           FROM limit_usage u WHERE u.kind = 'pool' GROUP BY u.pool) lp
       ON lp.k = LEFT(g.pool, 100) AND STRCMP(lp.pool, g.pool) = 0
LEFT JOIN limit_usage lr ON lr.kind = 'run' AND lr.dag_run_id = g.dag_run_id
LEFT JOIN (SELECT LEFT(u.dag_id, 100) AS k1, LEFT(u.task_id, 100) AS k2, u.dag_id, u.task_id, MAX(u.free) AS free
           FROM limit_usage u WHERE u.kind = 'task' GROUP BY u.dag_id, u.task_id) lt
       ON lt.k1 = LEFT(g.dag_id, 100) AND lt.k2 = LEFT(g.task_id, 100)
          AND STRCMP(lt.dag_id, g.dag_id) = 0 AND STRCMP(lt.task_id, g.task_id) = 0
LEFT JOIN limit_usage lm ON lm.kind = 'task_run' AND lm.dag_run_id = g.dag_run_id AND lm.task_id = g.task_id
LEFT JOIN (SELECT LEFT(u.executor, 100) AS k, u.executor, MAX(u.free) AS free
           FROM limit_usage u WHERE u.kind = 'executor' GROUP BY u.executor) le
       ON le.k = LEFT(g.executor, 100) AND STRCMP(le.executor, g.executor) = 0
LEFT JOIN (SELECT x.pool, COUNT(*) AS n, SUM(x.slots) AS slots FROM pool_reservation x GROUP BY x.pool) ro
       ON ro.pool = g.pool
GROUP BY g.pool, reason;
