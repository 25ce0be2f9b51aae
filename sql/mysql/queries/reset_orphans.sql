-- result bool: ran
CALL reset_orphans_v2(:threshold, :interval, :job_id, :now)
