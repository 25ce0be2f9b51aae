-- `engine dags drain DAG` / `engine undrain DAG`.
-- MySQL: no UPDATE ... RETURNING; update, then select the row back.
UPDATE dag SET is_draining = :draining WHERE dag_id = :dag_id AND is_active;
SELECT dag_id FROM dag WHERE dag_id = :dag_id AND is_active
