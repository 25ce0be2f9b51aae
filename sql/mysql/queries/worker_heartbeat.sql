CALL heartbeat_v5(:job_id, :running, :now)
