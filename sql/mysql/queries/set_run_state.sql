CALL set_run_state_v3(:dag_id, :run_id, :action, :reason, :now)
