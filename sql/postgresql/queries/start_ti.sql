SELECT * FROM start_ti_v1(:ti_id, :token, :job_id, :hostname, :log_dir, :now)
