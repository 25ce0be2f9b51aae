-- `engine demo --executor E`: the PythonTasks of a sample DAG run on executor E (its BashTasks stay
-- on the database queue: each sample DAG then mixes executors). Until the DAG's next sync.
UPDATE task SET executor = :executor WHERE dag_id = :dag_id AND kind = 'python'
