-- Tasks of a sync whose pool or executor does not exist, or that can never fit their pool (a pool of
-- 0 slots is closed, not too small: it holds the work until it is opened).
-- MySQL: the parallel lists arrive as JSON arrays (engine.db.run), zipped by position.
SELECT x.dag_id, x.task_id, x.pool, x.pool_slots, p.slots, x.executor,
       (p.name IS NULL) AS unknown_pool, (e.name IS NULL) AS unknown_executor
FROM (
    SELECT d.dag_id, t.task_id, pl.pool, ps.pool_slots, ex.executor
    FROM JSON_TABLE(:dag_ids, '$[*]' COLUMNS (n FOR ORDINALITY,
             dag_id VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) d
    JOIN JSON_TABLE(:task_ids, '$[*]' COLUMNS (n FOR ORDINALITY,
             task_id VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) t ON t.n = d.n
    JOIN JSON_TABLE(:pools, '$[*]' COLUMNS (n FOR ORDINALITY,
             pool VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) pl ON pl.n = d.n
    JOIN JSON_TABLE(:pool_slots, '$[*]' COLUMNS (n FOR ORDINALITY, pool_slots INT PATH '$')) ps ON ps.n = d.n
    JOIN JSON_TABLE(:executors, '$[*]' COLUMNS (n FOR ORDINALITY,
             executor VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) ex ON ex.n = d.n
) x
LEFT JOIN pool p ON p.name = x.pool
LEFT JOIN executor e ON e.name = x.executor
WHERE p.name IS NULL OR e.name IS NULL OR (p.slots > 0 AND x.pool_slots > p.slots)
ORDER BY x.dag_id, x.task_id
