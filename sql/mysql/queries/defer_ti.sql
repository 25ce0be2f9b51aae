-- A worker reports that a running try raised Defer (defer_ti_v1); kwargs travel as JSON text.
SELECT defer_ti_v1(:ti_id, :try_number, :classpath, :trigger_kwargs, :method, :next_kwargs, :timeout, :now) AS state
