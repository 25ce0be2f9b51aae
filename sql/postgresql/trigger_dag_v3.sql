-- trigger_dag_v3(dag_id, run_id, conf, logical_date, now): a manual run, created `queued`, as
-- trigger_dag_v2, with a logical date of the caller's (`engine dags trigger --logical-date`,
-- `engine dags test`); NULL: now. A NULL run_id becomes manual__<logical date in UTC, ISO 8601
-- with microseconds>.
-- Lock: none beyond the row it inserts; the unique key (dag_id, run_id) makes a second
-- trigger with the same run id fail instead of duplicating the run.
-- Invariant: one run per (dag_id, run_id); every run id it writes follows RUN_ID_RULE
-- (engine/validate.py).
-- Callers may assume: on success the run exists, `queued`.
-- Raises (SQLSTATE P0001, one line) for a bad run id, an unknown or inactive DAG, a duplicate
-- run id and a logical date outside 1970-2999 (engine/validate.py MIN_DATE, MAX_DATE).
CREATE OR REPLACE FUNCTION trigger_dag_v3(p_dag_id text, p_run_id text, p_conf jsonb, p_logical_date timestamptz,
                                          p_now timestamptz DEFAULT NULL)
RETURNS TABLE (dag_run_id bigint, run_id text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := coalesce(p_now, now());
    v_logical timestamptz := coalesce(p_logical_date, p_now, now());
    v_run     text := coalesce(p_run_id, 'manual__' || to_char(coalesce(p_logical_date, p_now, now()) AT TIME ZONE 'UTC',
                                                            'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'));
BEGIN
    IF v_logical < '1970-01-01 00:00:00+00' OR v_logical > '2999-12-31 23:59:59+00' THEN
        RAISE EXCEPTION 'logical date % is out of range; use a date from 1970-01-01 to 2999-12-31', v_logical;
    END IF;
    IF v_run !~ '^[A-Za-z0-9_.:+~-]{1,250}$' OR v_run IN ('.', '..') THEN
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
    VALUES (p_dag_id, v_run, 'manual', 'queued', v_logical, v_now, coalesce(p_conf, '{}'::jsonb), v_now)
    ON CONFLICT ON CONSTRAINT dag_run_dag_id_run_id DO NOTHING
    RETURNING r.id, r.run_id;
    IF NOT FOUND THEN  -- the unique key decided, also against a concurrent trigger
        RAISE EXCEPTION 'DAG % already has a run %; pick another --run-id', quote_literal(p_dag_id), quote_literal(v_run);
    END IF;
END;
$$;
