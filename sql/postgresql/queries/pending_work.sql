-- Is anything left for workers of these queues (queued or running)? Used by `worker --burst`.
SELECT pending_work_v1(CAST(:queues AS text[])) AS n
