SELECT * FROM claim_tis_v1(:job_id, :hostname, CAST(:queues AS text[]), :limit, :log_dir, :now)
