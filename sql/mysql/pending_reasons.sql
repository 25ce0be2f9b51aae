-- pending_reasons: why each scheduled TI is not queued yet — the first reason, in the order
-- queue_tis_v2 checks them, that holds for it, from the same counts (limit_usage):
--   dag removed (a sync found the DAG no longer defined: dag.is_active false)
--   | task removed (its task is no longer in the DAG: task.is_active false, or no task row;
--     schedule_tis_v2 turns such a TI `removed`)
--   | dag paused | deployment draining | dag draining (none of the three holds a resume back:
--     a TI whose trigger fired, next_method set, is queued whatever its DAG's state)
--   | run not running
--   | unknown pool (no pool row: `engine pools set P N` creates it)
--   | unknown executor (no executor row)
--   | pool closed (a pool of 0 slots: it holds its work until `engine pools set P N` opens it)
--   | pool too small (pool_slots > slots: never fits)
--   | waiting for N preempted TI(s) to stop (preempt_v1 stopped running TIs for it; their
--     tries are still stopping) | slots reserved for it (pool_reservation: the pool keeps
--     what frees up for it, queue_tis_v4)
--   | pool full | slots reserved for N other TI(s) (free slots, but pool_reservation keeps
--     enough of them for other scheduled TIs that it does not fit beside them: queue_tis_v4
--     holds them, since 0016) | run at max_active_tasks | task at max_active_tis_per_dag
--   | task at max_active_tis_per_dagrun | executor at parallelism
--   | runnable: no limit is full; the next scheduler pass queues it unless higher-priority
--     work takes the room first (or max_tis per pass was reached).
-- Partitions are matched on limit_usage's key columns (never on its `key` label: ids may
-- contain dots).
-- MariaDB joins (since revision 0062): limit_usage's pool, task and executor rows are read as
-- grouped derived tables keyed by the names' first 100 characters, the whole names compared
-- beside the key, as in pending_counts (read its header: a name is too long for the key MariaDB
-- builds on a derived table, and the join was a block nested loop; counted by reason on a world
-- of 50,000 scheduled TIs and 1,073 running: 4.4 s before, 1.35 s since).
-- MySQL: `key` is a reserved word; `t.is_active IS NOT TRUE` also holds when there is no task row.
CREATE VIEW pending_reasons AS
SELECT ti.id AS ti_id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.priority_weight,
       ti.pool, ti.pool_slots, lp.free AS pool_free,
       CASE
           WHEN NOT d.is_active THEN 'dag removed'
           WHEN t.is_active IS NOT TRUE THEN 'task removed'
           WHEN d.is_paused AND ti.next_method IS NULL THEN 'dag paused'
           WHEN COALESCE(dp.is_draining, FALSE) AND ti.next_method IS NULL THEN 'deployment draining'
           WHEN d.is_draining AND ti.next_method IS NULL THEN 'dag draining'
           WHEN r.state <> 'running' THEN 'run not running'
           WHEN p.name IS NULL THEN 'unknown pool'
           WHEN e.name IS NULL THEN 'unknown executor'
           WHEN lp.cap = 0 THEN 'pool closed'
           WHEN lp.cap IS NOT NULL AND ti.pool_slots > lp.cap THEN 'pool too small'
           WHEN pv.n > 0 THEN CONCAT('waiting for ', pv.n, ' preempted TI(s) to stop')
           WHEN rs.ti_id IS NOT NULL AND lp.free < ti.pool_slots THEN 'slots reserved for it'
           WHEN lp.free < ti.pool_slots THEN 'pool full'
           WHEN rs.ti_id IS NULL AND lp.free - ro.slots < ti.pool_slots 
                THEN CONCAT('slots reserved for ', ro.n, ' other TI(s)')
           WHEN lr.free < 1 THEN 'run at max_active_tasks'
           WHEN lt.free < 1 THEN 'task at max_active_tis_per_dag'
           WHEN lm.free < 1 THEN 'task at max_active_tis_per_dagrun'
           WHEN le.free < 1 THEN 'executor at parallelism'
           ELSE 'runnable'
       END AS reason
FROM task_instance ti
JOIN dag_run r ON r.id = ti.dag_run_id
JOIN dag d ON d.dag_id = ti.dag_id
LEFT JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
LEFT JOIN pool p ON p.name = ti.pool
LEFT JOIN executor e ON e.name = ti.executor
LEFT JOIN deployment dp ON dp.id = 1
LEFT JOIN (SELECT LEFT(u.pool, 100) AS k, u.pool, MAX(u.cap) AS cap, MAX(u.free) AS free
           FROM limit_usage u WHERE u.kind = 'pool' GROUP BY u.pool) lp
       ON lp.k = LEFT(ti.pool, 100) AND STRCMP(lp.pool, ti.pool) = 0
LEFT JOIN limit_usage lr ON lr.kind = 'run' AND lr.dag_run_id = ti.dag_run_id
LEFT JOIN (SELECT LEFT(u.dag_id, 100) AS k1, LEFT(u.task_id, 100) AS k2, u.dag_id, u.task_id, MAX(u.free) AS free
           FROM limit_usage u WHERE u.kind = 'task' GROUP BY u.dag_id, u.task_id) lt
       ON lt.k1 = LEFT(ti.dag_id, 100) AND lt.k2 = LEFT(ti.task_id, 100)
          AND STRCMP(lt.dag_id, ti.dag_id) = 0 AND STRCMP(lt.task_id, ti.task_id) = 0
LEFT JOIN limit_usage lm ON lm.kind = 'task_run' AND lm.dag_run_id = ti.dag_run_id AND lm.task_id = ti.task_id
LEFT JOIN (SELECT LEFT(u.executor, 100) AS k, u.executor, MAX(u.free) AS free
           FROM limit_usage u WHERE u.kind = 'executor' GROUP BY u.executor) le
       ON le.k = LEFT(ti.executor, 100) AND STRCMP(le.executor, ti.executor) = 0
LEFT JOIN pool_reservation rs ON rs.ti_id = ti.id
LEFT JOIN (SELECT x.pool, COUNT(*) AS n, SUM(x.slots) AS slots FROM pool_reservation x GROUP BY x.pool) ro
       ON ro.pool = ti.pool
LEFT JOIN (SELECT v.preempted_for, COUNT(*) AS n FROM task_instance v WHERE v.state = 'preempting'
           GROUP BY v.preempted_for) pv ON pv.preempted_for = ti.id
WHERE ti.state = 'scheduled'
