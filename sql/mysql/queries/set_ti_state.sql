CALL set_ti_state_v3(:dag_id, :run_id, :task_id, :map_index, :new_state, :action, :reason, :now)
