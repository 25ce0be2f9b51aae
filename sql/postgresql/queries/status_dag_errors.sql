SELECT dag_id, error_step AS step, left(error, 200) AS error, error_at FROM dag_errors ORDER BY error_at DESC, dag_id
