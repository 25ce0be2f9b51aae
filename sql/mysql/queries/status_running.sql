SELECT dag_id, run_id, task_id, map_index, try_number, hostname, start_date FROM running_tis
ORDER BY start_date LIMIT 20
