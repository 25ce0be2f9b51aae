-- `engine dags trigger` / `engine dags test`: a manual run with an optional logical date.
CALL trigger_dag_v3(:dag_id, :run_id, :conf, :logical_date, :now)
