SELECT dag_id, task_id FROM task WHERE pool = :name ORDER BY is_active DESC, dag_id, task_id LIMIT 1
