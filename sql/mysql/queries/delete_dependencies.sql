DELETE FROM task_dependency WHERE dag_id = :dag_id
