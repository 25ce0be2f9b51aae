SELECT * FROM create_dag_runs_v2(:now)
