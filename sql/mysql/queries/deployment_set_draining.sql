-- `engine drain` / `engine undrain`: the deployment-wide flag (undrain also ends every DAG's drain).
UPDATE deployment SET drain_started_at = CASE WHEN :draining THEN COALESCE(drain_started_at, UTC_TIMESTAMP(6)) END,
       is_draining = :draining
WHERE id = 1;
UPDATE dag SET is_draining = FALSE WHERE is_draining AND NOT :draining;
