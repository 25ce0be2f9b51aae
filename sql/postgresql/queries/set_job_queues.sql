-- A worker records the queues it claims from (job.queues: engine status --check, health_check).
SELECT set_job_queues_v1(:job_id, :queues) AS updated
