-- What operators changed in a run (`engine runs show`), oldest first.
SELECT at, action, task_id, map_index, try_number, from_state, to_state, reason
FROM state_change
WHERE dag_id = :dag_id AND run_id = :run_id
ORDER BY id
