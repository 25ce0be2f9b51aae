-- A clean shutdown: the job is finished, not dead.
UPDATE job SET state = 'success', end_date = now() WHERE id = :job_id AND state = 'running'
