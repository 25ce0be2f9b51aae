-- The TIs of a run from the view ti_overview (`engine runs show`, `tasks list`, `tasks state`).
SELECT task_id, map_index, state, try_number, max_tries, start_date, end_date, duration_s, hostname, reason,
       log_path
FROM ti_overview
WHERE dag_id = :dag_id AND run_id = :run_id
  AND (CAST(:task_id AS text) IS NULL OR task_id = CAST(:task_id AS text)) AND (CAST(:map_index AS int) IS NULL OR map_index = CAST(:map_index AS int))
  AND (CAST(:state AS text) IS NULL OR state = CAST(:state AS text))
ORDER BY task_id, map_index
