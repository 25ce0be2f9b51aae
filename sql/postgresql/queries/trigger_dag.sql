SELECT * FROM trigger_dag_v2(:dag_id, :run_id, CAST(:conf AS jsonb), :now)
