-- trigger_dag_v1(dag_id, run_id, conf, now): a manual run, created `queued`;
-- create_dag_runs_v1 starts it when max_active_runs allows.
-- Lock: none beyond the row it inserts; the unique key (dag_id, run_id) makes a second
-- trigger with the same run id fail instead of duplicating the run.
-- Raises (SQLSTATE P0001, one line) for an unknown or inactive DAG and a duplicate run id.
CREATE OR REPLACE FUNCTION trigger_dag_v1(p_dag_id text, p_run_id text, p_conf jsonb, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (dag_run_id bigint, run_id text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_run text := coalesce(p_run_id, 'manual__' || to_char(v_now AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'));
BEGIN
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
