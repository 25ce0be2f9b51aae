SELECT * FROM set_run_state_v2(:dag_id, :run_id, :action, CAST(:reason AS text), :now)
