-- trigger_dag_v2(dag_id, run_id, conf, now): a manual run, created `queued`;
-- create_dag_runs_v2 starts it when max_active_runs allows. A NULL run_id becomes
-- manual__<now in UTC, ISO 8601 with microseconds>.
-- New in v2: the run id must follow engine/validate.py's RUN_ID_RULE: 1-250 characters from
-- A-Z a-z 0-9 _ . - : + ~, and not '.' or '..', so it is a safe path component (log files) and
-- fits MySQL's VARCHAR(250). Anything else ('', '../x', 300 characters, a space, a NUL) is
-- refused before anything is written.
-- Lock: none beyond the row it inserts; the unique key (dag_id, run_id) makes a second
-- trigger with the same run id fail instead of duplicating the run.
-- Invariant: one run per (dag_id, run_id); every run id it writes follows RUN_ID_RULE.
-- Callers may assume: on success the run exists, `queued`.
-- Raises (SQLSTATE P0001, one line) for a bad run id, an unknown or inactive DAG and a
-- duplicate run id.
CREATE OR REPLACE FUNCTION trigger_dag_v2(p_dag_id text, p_run_id text, p_conf jsonb, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (dag_run_id bigint, run_id text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_run text := coalesce(p_run_id, 'manual__' || to_char(v_now AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'));
BEGIN
    IF v_run !~ '^[A-Za-z0-9_.:+~-]{1,250}$' OR v_run IN ('.', '..') THEN
        -- Shown on one line: control characters become '?', at most 60 characters.
        RAISE EXCEPTION 'bad run id %; use 1-250 characters from A-Z a-z 0-9 _ . - : + ~ (not ''.'' or ''..'')',
            quote_literal(regexp_replace(left(v_run, 60), '[[:cntrl:]]', '?', 'g')
                          || CASE WHEN length(v_run) > 60 THEN '...' ELSE '' END);
    END IF;
    PERFORM 1 FROM dag d WHERE d.dag_id = p_dag_id AND d.is_active;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown DAG %: not synced or no longer in the DAG files; see `engine dags list`', quote_literal(p_dag_id);
    END IF;
    RETURN QUERY
    INSERT INTO dag_run AS r (dag_id, run_id, run_type, state, logical_date, run_after, conf, created_at)
    VALUES (p_dag_id, v_run, 'manual', 'queued', v_now, v_now, coalesce(p_conf, '{}'::jsonb), v_now)
    ON CONFLICT ON CONSTRAINT dag_run_dag_id_run_id DO NOTHING
    RETURNING r.id, r.run_id;
    IF NOT FOUND THEN  -- the unique key decided, also against a concurrent trigger
        RAISE EXCEPTION 'DAG % already has a run %; pick another --run-id', quote_literal(p_dag_id), quote_literal(v_run);
    END IF;
END;
$$;
