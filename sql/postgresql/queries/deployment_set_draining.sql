-- `engine drain` / `engine undrain`: the deployment-wide flag (undrain also ends every DAG's drain).
UPDATE deployment SET is_draining = :draining,
       drain_started_at = CASE WHEN :draining THEN coalesce(drain_started_at, now()) END
WHERE id = 1;
UPDATE dag SET is_draining = false WHERE is_draining AND NOT :draining;
