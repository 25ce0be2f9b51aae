SELECT * FROM reset_orphans_v2(:threshold, :interval, :job_id, :now)
