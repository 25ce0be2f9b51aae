SELECT * FROM set_ti_state_v2(:dag_id, :run_id, :task_id, CAST(:map_index AS int), :new_state, :action,
                              CAST(:reason AS text), :now)
