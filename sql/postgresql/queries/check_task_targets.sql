-- Tasks of a sync whose pool or executor does not exist, or that can never fit their pool (a pool of
-- 0 slots is closed, not too small: it holds the work until it is opened).
SELECT x.dag_id, x.task_id, x.pool, x.pool_slots, p.slots, x.executor,
       (p.name IS NULL) AS unknown_pool, (e.name IS NULL) AS unknown_executor
FROM unnest(CAST(:dag_ids AS text[]), CAST(:task_ids AS text[]), CAST(:pools AS text[]),
            CAST(:pool_slots AS int[]), CAST(:executors AS text[]))
     AS x (dag_id, task_id, pool, pool_slots, executor)
LEFT JOIN pool p ON p.name = x.pool
LEFT JOIN executor e ON e.name = x.executor
WHERE p.name IS NULL OR e.name IS NULL OR (p.slots > 0 AND x.pool_slots > p.slots)
ORDER BY x.dag_id, x.task_id
