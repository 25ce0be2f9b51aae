CALL heartbeat_v2(:job_id, :running, :now)
