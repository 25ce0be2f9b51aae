-- MySQL procedures have no parameter defaults: 16 is create_dag_runs_v4's p_max_per_dag default.
CALL create_dag_runs_v4(:now, 16)
