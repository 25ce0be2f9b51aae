SELECT * FROM claim_tis_v5(:job_id, :hostname, CAST(:queues AS text[]), :limit, :log_dir, :now)
