-- usage_drift: where the usage counters disagree with a recount of task_instance; empty when
-- they agree. The same view as sql/postgresql/usage_drift.sql (read it for the columns); one
-- statement, so InnoDB reads counters, pending deltas and TIs from one read view.
CREATE VIEW usage_drift AS
WITH held AS (
    SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor, ti.pool_slots
    FROM task_instance ti
    LEFT JOIN pool p ON p.name = ti.pool
    WHERE ti.state IN ('queued', 'running', 'preempting')
       OR (ti.state = 'deferred' AND COALESCE(p.include_deferred, FALSE))
)
SELECT 'pool' AS kind, CAST(NULL AS SIGNED) AS dag_run_id, CAST(NULL AS CHAR(250)) AS dag_id,
       CAST(NULL AS CHAR(250)) AS task_id, x.pool, CAST(NULL AS CHAR(250)) AS executor,
       CAST(SUM(x.c) AS SIGNED) AS counted, CAST(SUM(x.r) AS SIGNED) AS recounted
FROM (SELECT u.pool, u.slots AS c, 0 AS r FROM used_pool u
      UNION ALL SELECT d.pool, d.slots, 0 FROM usage_delta d WHERE d.kind IS NULL OR d.kind = 'pool'
      UNION ALL SELECT h.pool, 0, h.pool_slots FROM held h) x
GROUP BY x.pool HAVING SUM(x.c) <> SUM(x.r)
UNION ALL
SELECT 'run', x.dag_run_id, MIN(x.dag_id), NULL, NULL, NULL, SUM(x.c), SUM(x.r)
FROM (SELECT u.dag_run_id, u.dag_id, u.n AS c, 0 AS r FROM used_run u
      UNION ALL SELECT d.dag_run_id, d.dag_id, d.n, 0 FROM usage_delta d WHERE d.kind IS NULL OR d.kind = 'run'
      UNION ALL SELECT h.dag_run_id, h.dag_id, 0, 1 FROM held h) x
GROUP BY x.dag_run_id HAVING SUM(x.c) <> SUM(x.r)
UNION ALL
SELECT 'task', NULL, x.dag_id, x.task_id, NULL, NULL, SUM(x.c), SUM(x.r)
FROM (SELECT u.dag_id, u.task_id, u.n AS c, 0 AS r FROM used_task u
      UNION ALL SELECT d.dag_id, d.task_id, d.n, 0 FROM usage_delta d WHERE d.kind IS NULL OR d.kind = 'task'
      UNION ALL SELECT h.dag_id, h.task_id, 0, 1 FROM held h) x
GROUP BY x.dag_id, x.task_id HAVING SUM(x.c) <> SUM(x.r)
UNION ALL
SELECT 'task_run', x.dag_run_id, MIN(x.dag_id), x.task_id, NULL, NULL, SUM(x.c), SUM(x.r)
FROM (SELECT u.dag_run_id, u.dag_id, u.task_id, u.n AS c, 0 AS r FROM used_task_run u
      UNION ALL SELECT d.dag_run_id, d.dag_id, d.task_id, d.n, 0 FROM usage_delta d
      WHERE d.kind IS NULL OR d.kind = 'task_run'
      UNION ALL SELECT h.dag_run_id, h.dag_id, h.task_id, 0, 1 FROM held h) x
GROUP BY x.dag_run_id, x.task_id HAVING SUM(x.c) <> SUM(x.r)
UNION ALL
SELECT 'executor', NULL, NULL, NULL, NULL, x.executor, SUM(x.c), SUM(x.r)
FROM (SELECT u.executor, u.n AS c, 0 AS r FROM used_executor u
      UNION ALL SELECT d.executor, d.n, 0 FROM usage_delta d WHERE d.kind IS NULL OR d.kind = 'executor'
      UNION ALL SELECT h.executor, 0, 1 FROM held h) x
GROUP BY x.executor HAVING SUM(x.c) <> SUM(x.r)
