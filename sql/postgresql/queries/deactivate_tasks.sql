-- Tasks no longer in a DAG's file: kept (with their history) but no longer instantiated.
UPDATE task SET is_active = false WHERE dag_id = :dag_id AND NOT (task_id = ANY (CAST(:task_ids AS text[])))
