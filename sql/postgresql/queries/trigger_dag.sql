-- The NOTIFY wakes a scheduler to start the run now (engine/wakeup.py); delivered at commit.
SELECT pg_notify('engine_scheduler', '');
SELECT * FROM trigger_dag_v2(:dag_id, :run_id, CAST(:conf AS jsonb), :now)
