SELECT * FROM reset_orphans_v3(:threshold, :interval, :job_id, :now)
