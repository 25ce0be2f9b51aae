-- live_jobs: scheduler, worker and triggerer processes that say they are running, with the
-- age of their last heartbeat by the database clock (compare it with job_heartbeat_threshold).
CREATE VIEW live_jobs AS
SELECT j.id, j.kind, j.hostname, j.pid, j.start_date, j.latest_heartbeat,
       extract(epoch FROM now() - j.latest_heartbeat)::double precision AS heartbeat_age_s,
       (SELECT count(*) FROM task_instance ti WHERE ti.worker_job_id = j.id AND ti.state = 'running')::int AS running_tis
FROM job j
WHERE j.state = 'running';
