CALL heartbeat_v3(:job_id, :running, :now)
