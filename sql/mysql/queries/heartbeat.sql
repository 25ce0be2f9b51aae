-- result bool: alive
SELECT heartbeat_v1(:job_id, :now) AS alive
