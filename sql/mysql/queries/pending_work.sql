-- Is anything left for workers of these queues (queued or running)? Used by `worker --burst`.
-- MySQL: queues arrives as a JSON array.
SELECT pending_work_v1(:queues) AS n
