SELECT * FROM create_dag_runs_v4(:now)
