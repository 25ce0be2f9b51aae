-- A clean shutdown: the job is finished, not dead.
UPDATE job SET state = 'success', end_date = UTC_TIMESTAMP(6) WHERE id = :job_id AND state = 'running'
