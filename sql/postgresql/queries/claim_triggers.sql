-- One triggerer pass: timeouts, dead triggerers, new triggers to run (claim_triggers_v2).
SELECT * FROM claim_triggers_v2(:job_id, :limit, :threshold, :now)
