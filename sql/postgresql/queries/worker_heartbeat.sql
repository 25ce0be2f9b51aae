SELECT * FROM heartbeat_v2(:job_id, CAST(:running AS jsonb), :now)
