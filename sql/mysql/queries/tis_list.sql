-- The TIs of a run from the view ti_overview (`engine runs show`, `tasks list`, `tasks state`).
SELECT task_id, map_index, state, try_number, max_tries, start_date, end_date, duration_s, hostname, reason,
       log_path
FROM ti_overview
WHERE dag_id = :dag_id AND run_id = :run_id
  AND (:task_id IS NULL OR task_id = :task_id) AND (:map_index IS NULL OR map_index = :map_index)
  AND (:state IS NULL OR state = :state)
ORDER BY task_id, map_index
