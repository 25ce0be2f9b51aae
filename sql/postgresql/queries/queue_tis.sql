SELECT * FROM queue_tis_v1(:max_tis, :job_id, :now)
