-- `engine dags drain DAG` / `engine undrain DAG`.
-- MySQL: no UPDATE ... RETURNING; update, then select the row back, in the state asked for: a
-- DAG the UPDATE did not match (inactive) that a sync made active before the SELECT is not
-- reported as draining (or not) unless it is (a plain read sees that sync's commit).
UPDATE dag SET is_draining = :draining WHERE dag_id = :dag_id AND is_active;
SELECT dag_id FROM dag WHERE dag_id = :dag_id AND is_active AND is_draining = :draining
