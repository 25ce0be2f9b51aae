SELECT * FROM queue_tis_v2(:max_tis, :job_id, :now)
