-- A worker reports that a running try raised Defer (defer_ti_v3); kwargs travel as JSON text,
-- parsed by the function so that bad JSON is refused with a one-line error naming it. The
-- NOTIFY wakes a triggerer to run the new trigger now (engine/wakeup.py); delivered at commit.
SELECT pg_notify('engine_triggerer', '');
SELECT defer_ti_v3(:ti_id, :try_number, :classpath, :trigger_kwargs, :method, :next_kwargs, :timeout, :now) AS state
