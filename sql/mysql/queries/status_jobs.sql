SELECT id, kind, hostname, pid, ROUND(heartbeat_age_s, 1) AS heartbeat_age_s, running_tis
FROM live_jobs ORDER BY kind, id
