-- Is anything left for workers of these queues (queued or running)? Used by `worker --burst`.
SELECT count(*) AS n FROM task_instance
WHERE state IN ('queued', 'running') AND queue = ANY (CAST(:queues AS text[])) AND executor = 'default'
