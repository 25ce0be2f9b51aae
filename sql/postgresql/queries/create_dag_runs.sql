SELECT * FROM create_dag_runs_v3(:now)
