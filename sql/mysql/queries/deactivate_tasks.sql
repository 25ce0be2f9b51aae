-- Tasks no longer in a DAG's file: kept (with their history) but no longer instantiated.
-- MySQL: task_ids arrives as a JSON array.
UPDATE task SET is_active = false WHERE dag_id = :dag_id AND NOT JSON_CONTAINS(:task_ids, JSON_QUOTE(task_id))
