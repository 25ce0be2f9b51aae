-- A worker records the queues it claims from (job.queues: engine status --check, health_check).
UPDATE job SET queues = :queues WHERE id = :job_id
