-- result bool: is_active is_paused
-- Whether a DAG is stored (active or not), and whether it is paused.
SELECT dag_id, is_active, is_paused FROM dag WHERE dag_id = :dag_id
