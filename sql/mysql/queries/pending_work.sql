-- Is anything left for workers of these queues (queued or running)? Used by `worker --burst`.
-- MySQL: queues arrives as a JSON array.
SELECT COUNT(*) AS n FROM task_instance
WHERE state IN ('queued', 'running') AND executor = 'default'
  AND queue IN (SELECT q.queue FROM JSON_TABLE(:queues, '$[*]' COLUMNS (
                    queue VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) q)
