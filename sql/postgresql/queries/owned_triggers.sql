-- The waiting triggers a triggerer owns: what it should be running (owned_triggers_v1).
SELECT id FROM owned_triggers_v1(:job_id)
