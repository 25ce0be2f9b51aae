-- `engine runs list`: the newest runs first, from the view run_overview.
SELECT dag_id, run_id, run_type, state, logical_date, start_date, end_date, duration_s, tis, success, failed,
       skipped, unfinished, reason
FROM run_overview
WHERE (CAST(:dag_id AS text) IS NULL OR dag_id = CAST(:dag_id AS text)) AND (CAST(:state AS text) IS NULL OR state = CAST(:state AS text))
ORDER BY created_at DESC, dag_run_id DESC
LIMIT :limit
