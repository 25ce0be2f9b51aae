-- One run of run_overview (`engine runs show`).
SELECT dag_id, run_id, run_type, state, logical_date, start_date, end_date, duration_s, tis, success, failed,
       skipped, unfinished, reason
FROM run_overview
WHERE dag_id = :dag_id AND run_id = :run_id
