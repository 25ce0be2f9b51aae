SELECT * FROM trigger_dag_v1(:dag_id, :run_id, CAST(:conf AS jsonb), :now)
