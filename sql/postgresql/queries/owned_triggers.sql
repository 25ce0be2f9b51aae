-- The waiting triggers a triggerer owns: what it should be running.
SELECT g.id FROM trigger g WHERE g.triggerer_job_id = :job_id AND g.fired_at IS NULL
