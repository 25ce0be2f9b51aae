-- The NOTIFY wakes a scheduler to evaluate the finished TI's downstream now (engine/wakeup.py):
-- it is delivered only if this transaction commits.
SELECT pg_notify('engine_scheduler', '');
SELECT finish_ti_v3(:ti_id, :try_number, :exit_code, :timed_out, :reason, :now, NULL, NULL) AS state
