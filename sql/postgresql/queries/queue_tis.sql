SELECT * FROM queue_tis_v3(:max_tis, :job_id, :now)
