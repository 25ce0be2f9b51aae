CALL heartbeat_v4(:job_id, :running, :now)
