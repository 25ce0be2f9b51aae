-- MySQL procedures have no parameter defaults: 16 is create_dag_runs_v1's p_max_per_dag default.
CALL create_dag_runs_v1(:now, 16)
