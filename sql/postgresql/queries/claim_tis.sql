SELECT * FROM claim_tis_v4(:job_id, :hostname, CAST(:queues AS text[]), :limit, :log_dir, :now)
