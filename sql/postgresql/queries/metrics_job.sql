-- One job as the database sees it (view live_jobs), for its Prometheus endpoint (engine/metrics.py).
SELECT heartbeat_age_s, running_tis FROM live_jobs WHERE id = :job_id
