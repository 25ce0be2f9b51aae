CALL trigger_dag_v2(:dag_id, :run_id, :conf, :now)
