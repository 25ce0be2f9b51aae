SELECT * FROM claim_tis_v3(:job_id, :hostname, CAST(:queues AS text[]), :limit, :log_dir, :now)
