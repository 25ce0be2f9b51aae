CALL trigger_dag_v1(:dag_id, :run_id, :conf, :now)
