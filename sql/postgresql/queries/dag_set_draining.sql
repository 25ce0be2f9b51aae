-- `engine dags drain DAG` / `engine undrain DAG`.
UPDATE dag SET is_draining = :draining WHERE dag_id = :dag_id AND is_active RETURNING dag_id
