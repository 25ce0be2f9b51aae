SELECT dag_id, run_id, state, tis, success, failed, skipped, unfinished, created_at FROM recent_runs
ORDER BY created_at DESC LIMIT 10
