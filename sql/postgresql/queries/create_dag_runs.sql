SELECT * FROM create_dag_runs_v1(:now)
