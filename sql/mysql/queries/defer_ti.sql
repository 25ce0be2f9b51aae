-- A worker reports that a running try raised Defer (defer_ti_v3); kwargs travel as JSON text,
-- checked by the function so that bad JSON is refused with a one-line error naming it.
SELECT defer_ti_v3(:ti_id, :try_number, :classpath, :trigger_kwargs, :method, :next_kwargs, :timeout, :now) AS state
