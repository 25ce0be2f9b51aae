-- running_tis: TIs running now, who runs them and since when.
CREATE VIEW running_tis AS
SELECT ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, ti.pool, ti.queue,
       ti.hostname, ti.worker_job_id, ti.start_date, ti.last_heartbeat_at, ti.log_path
FROM task_instance ti
WHERE ti.state = 'running'
