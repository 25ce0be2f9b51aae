-- The finished tries of one TI (`engine logs`): where each try's log is and which host wrote it.
SELECT try_number, state, hostname, log_path, start_date, end_date, reason
FROM task_instance_history
WHERE dag_id = :dag_id AND run_id = :run_id AND task_id = :task_id AND map_index = :map_index
ORDER BY try_number, id
