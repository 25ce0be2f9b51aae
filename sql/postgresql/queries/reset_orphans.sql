SELECT * FROM reset_orphans_v1(:threshold, :interval, :job_id, :now)
