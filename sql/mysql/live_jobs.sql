-- live_jobs: scheduler, worker and triggerer processes that say they are running, with the
-- age of their last heartbeat by the database clock (compare it with job_heartbeat_threshold).
-- MySQL: DATETIME(6) holds UTC, so the clock is UTC_TIMESTAMP(6) (whatever the session's
-- time_zone); the age in seconds from TIMESTAMPDIFF in microseconds.
CREATE VIEW live_jobs AS
SELECT j.id, j.kind, j.hostname, j.pid, j.start_date, j.latest_heartbeat,
       TIMESTAMPDIFF(MICROSECOND, j.latest_heartbeat, UTC_TIMESTAMP(6)) / 1e6 AS heartbeat_age_s,
       CAST((SELECT COUNT(*) FROM task_instance ti WHERE ti.worker_job_id = j.id AND ti.state = 'running')
            AS SIGNED) AS running_tis
FROM job j
WHERE j.state = 'running'
