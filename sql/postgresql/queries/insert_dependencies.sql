INSERT INTO task_dependency (dag_id, upstream_task_id, task_id)
SELECT :dag_id, e.up, e.down
FROM unnest(CAST(:ups AS text[]), CAST(:downs AS text[])) AS e (up, down)
