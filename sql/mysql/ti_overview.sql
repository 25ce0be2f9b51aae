-- ti_overview: every task instance with its state, try, duration, host and reason
-- (`engine runs show`, `engine tasks list`, `engine tasks state` print it). duration_s: end_date
-- (or now, while it runs) minus start_date of the current try; NULL before it started.
CREATE VIEW ti_overview AS
SELECT ti.id AS ti_id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.state, ti.try_number, ti.max_tries,
       ti.start_date, ti.end_date,
       TIMESTAMPDIFF(MICROSECOND, ti.start_date, COALESCE(ti.end_date, UTC_TIMESTAMP(6))) / 1000000.0 AS duration_s,
       ti.hostname, ti.pool, ti.queue, ti.exit_code, ti.state_reason AS reason, ti.log_path, ti.worker_job_id
FROM task_instance ti
