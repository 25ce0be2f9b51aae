SELECT id, kind, hostname, pid, round(CAST(heartbeat_age_s AS numeric), 1) AS heartbeat_age_s, running_tis
FROM live_jobs ORDER BY kind, id
