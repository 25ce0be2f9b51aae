-- usage_drift: where the usage counters disagree with a recount of task_instance; empty when
-- they agree (`engine db check` reports its rows; recount_usage_v1 repairs them). One row per
-- partition that differs: kind (pool, run, task, task_run, executor), its key columns (NULL
-- where not part of that kind's key; a run's dag_id is shown beside its id), `counted` (the
-- counter + the committed usage_delta rows not folded yet) and `recounted` (what the TIs hold,
-- as limit_usage counts: queued, running, preempting, and deferred in a pool with
-- include_deferred; for a pool, the sum of pool_slots). Unlike limit_usage it covers every
-- partition, limited or not. One statement, so one snapshot: counters, pending deltas and TIs
-- are read at the same instant. It reads every active TI: a check, not a hot path.
CREATE VIEW usage_drift AS
WITH held AS (
    SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor, ti.pool_slots
    FROM task_instance ti
    LEFT JOIN pool p ON p.name = ti.pool
    WHERE ti.state IN ('queued', 'running', 'preempting')
       OR (ti.state = 'deferred' AND coalesce(p.include_deferred, false))
), pending AS (
    SELECT * FROM usage_delta
)
SELECT 'pool'::text AS kind, NULL::bigint AS dag_run_id, NULL::text AS dag_id, NULL::text AS task_id,
       x.pool, NULL::text AS executor, sum(x.c)::bigint AS counted, sum(x.r)::bigint AS recounted
FROM (SELECT u.pool, u.slots AS c, 0 AS r FROM used_pool u
      UNION ALL SELECT d.pool, d.slots, 0 FROM pending d WHERE d.kind IS NULL OR d.kind = 'pool'
      UNION ALL SELECT h.pool, 0, h.pool_slots FROM held h) x
GROUP BY x.pool HAVING sum(x.c) <> sum(x.r)
UNION ALL
SELECT 'run', x.dag_run_id, min(x.dag_id), NULL, NULL, NULL, sum(x.c), sum(x.r)
FROM (SELECT u.dag_run_id, u.dag_id, u.n AS c, 0 AS r FROM used_run u
      UNION ALL SELECT d.dag_run_id, d.dag_id, d.n, 0 FROM pending d WHERE d.kind IS NULL OR d.kind = 'run'
      UNION ALL SELECT h.dag_run_id, h.dag_id, 0, 1 FROM held h) x
GROUP BY x.dag_run_id HAVING sum(x.c) <> sum(x.r)
UNION ALL
SELECT 'task', NULL, x.dag_id, x.task_id, NULL, NULL, sum(x.c), sum(x.r)
FROM (SELECT u.dag_id, u.task_id, u.n AS c, 0 AS r FROM used_task u
      UNION ALL SELECT d.dag_id, d.task_id, d.n, 0 FROM pending d WHERE d.kind IS NULL OR d.kind = 'task'
      UNION ALL SELECT h.dag_id, h.task_id, 0, 1 FROM held h) x
GROUP BY x.dag_id, x.task_id HAVING sum(x.c) <> sum(x.r)
UNION ALL
SELECT 'task_run', x.dag_run_id, min(x.dag_id), x.task_id, NULL, NULL, sum(x.c), sum(x.r)
FROM (SELECT u.dag_run_id, u.dag_id, u.task_id, u.n AS c, 0 AS r FROM used_task_run u
      UNION ALL SELECT d.dag_run_id, d.dag_id, d.task_id, d.n, 0 FROM pending d
      WHERE d.kind IS NULL OR d.kind = 'task_run'
      UNION ALL SELECT h.dag_run_id, h.dag_id, h.task_id, 0, 1 FROM held h) x
GROUP BY x.dag_run_id, x.task_id HAVING sum(x.c) <> sum(x.r)
UNION ALL
SELECT 'executor', NULL, NULL, NULL, NULL, x.executor, sum(x.c), sum(x.r)
FROM (SELECT u.executor, u.n AS c, 0 AS r FROM used_executor u
      UNION ALL SELECT d.executor, d.n, 0 FROM pending d WHERE d.kind IS NULL OR d.kind = 'executor'
      UNION ALL SELECT h.executor, 0, 1 FROM held h) x
GROUP BY x.executor HAVING sum(x.c) <> sum(x.r);
