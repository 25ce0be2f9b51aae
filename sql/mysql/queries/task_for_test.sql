-- result json: env op_kwargs expand
-- result bool: is_paused
-- One active task with its DAG's file and pause flag (`engine tasks test`, `engine dags test`).
SELECT t.dag_id, t.task_id, t.kind, t.bash_command, t.env, t.python_callable, t.op_kwargs, t.expand, t.map_count,
       t.execution_timeout, d.fileloc, d.is_paused
FROM task t JOIN dag d ON d.dag_id = t.dag_id
WHERE t.dag_id = :dag_id AND t.task_id = :task_id AND t.is_active AND d.is_active
