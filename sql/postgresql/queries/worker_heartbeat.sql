SELECT * FROM heartbeat_v3(:job_id, CAST(:running AS jsonb), :now)
