-- `engine dags trigger` / `engine dags test`: a manual run with an optional logical date.
SELECT * FROM trigger_dag_v3(:dag_id, CAST(:run_id AS text), CAST(:conf AS jsonb), CAST(:logical_date AS timestamptz), :now)
