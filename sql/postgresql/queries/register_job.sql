-- A scheduler, worker or triggerer process announces itself (register_job_v1).
SELECT register_job_v1(:kind, :hostname, :pid) AS id
