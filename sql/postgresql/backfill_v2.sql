-- backfill_v2(dag_id, start, end, max_active, rerun_failed, now): one step of
-- `engine dags backfill`: the DAG's cron schedule points L with start <= L <= end get a run
-- (run_type 'backfill', run id backfill__<L in UTC ISO 8601>, data interval [L, next(L)),
-- created `queued`: create_dag_runs starts it when the DAG's max_active_runs allows), oldest
-- first, while fewer than max_active (NULL: no limit) backfill runs of the DAG are queued or
-- running. A point that already has a run of any type is skipped, unless that run failed and
-- rerun_failed: then its failed and upstream_failed TIs go back to `none` with a new try
-- (state_change rows, action 'clear') and the run to `running`. The command calls it again
-- until `remaining` is 0.
-- New in v2: the schedule points are those of the DAG's time zone (cron_next_v3, as
-- create_dag_runs_v3 reads them); logical dates and run ids stay UTC instants.
-- Returns one row: (created, rerun, active, remaining): runs created and failed runs reopened
-- now, backfill runs queued or running, points still waiting for a free slot.
-- Raises (one line, nothing changed) for an unknown DAG, a DAG without a cron schedule, an
-- end before the start, dates outside 1970-2999 and a max_active below 1.
-- Lock: the dag row (FOR UPDATE), as create_dag_runs takes it: two backfills of a DAG, or a
-- backfill and a scheduler, never create the same run. Then reopened runs, then their TIs.
-- Invariant: at most one run per (dag_id, logical date) from a backfill; no more than
-- max_active backfill runs of the DAG are active after a call.
-- Callers may assume: one transaction; it never waits on a scheduler longer than the dag row.
CREATE OR REPLACE FUNCTION backfill_v2(p_dag_id text, p_start timestamptz, p_end timestamptz, p_max_active int,
                                       p_rerun_failed boolean, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (created int, rerun int, active int, remaining int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    v_reason   text := 'backfill --rerun-failed';
    v_dag      record;
    v_logical  timestamptz;
    v_next     timestamptz;
    v_existing record;
    v_active   int;
    v_created  int := 0;
    v_rerun    int := 0;
    v_left     int := 0;
    v_points   int := 0;
BEGIN
    IF p_start IS NULL OR p_end IS NULL OR p_start > p_end THEN
        RAISE EXCEPTION 'backfill: --end (%) is before --start (%); give a start on or before the end', p_end, p_start;
    END IF;
    IF p_start < '1970-01-01 00:00:00+00' OR p_end > '2999-12-31 23:59:59+00' THEN
        RAISE EXCEPTION 'backfill: dates must be from 1970-01-01 to 2999-12-31';
    END IF;
    IF p_max_active IS NOT NULL AND p_max_active < 1 THEN
        RAISE EXCEPTION 'backfill: --max-active-runs must be at least 1 (got %)', p_max_active;
    END IF;
    SELECT d.* INTO v_dag FROM dag d WHERE d.dag_id = p_dag_id AND d.is_active FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown DAG %: not synced or no longer in the DAG files; see `engine dags list`', quote_literal(p_dag_id);
    END IF;
    IF v_dag.schedule IS NULL THEN
        RAISE EXCEPTION 'DAG % has no schedule, so nothing to backfill; use `engine dags trigger % --logical-date DATE`',
            quote_literal(p_dag_id), p_dag_id;
    END IF;
    SELECT count(*) INTO v_active FROM dag_run r
    WHERE r.dag_id = p_dag_id AND r.run_type = 'backfill' AND r.state IN ('queued', 'running');

    v_logical := cron_next_v3(v_dag.schedule, v_dag.timezone, p_start - interval '1 microsecond');
    WHILE v_logical IS NOT NULL AND v_logical <= p_end LOOP
        v_points := v_points + 1;
        v_next := cron_next_v3(v_dag.schedule, v_dag.timezone, v_logical);
        SELECT r.* INTO v_existing FROM dag_run r
        WHERE r.dag_id = p_dag_id AND r.logical_date = v_logical ORDER BY r.id LIMIT 1 FOR UPDATE;
        IF FOUND THEN
            IF coalesce(p_rerun_failed, false) AND v_existing.state = 'failed' THEN
                INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number,
                                          from_state, to_state, reason)
                SELECT v_now, 'clear', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, ti.state,
                       'none', v_reason
                FROM task_instance ti
                WHERE ti.dag_run_id = v_existing.id AND ti.state IN ('failed', 'upstream_failed');
                UPDATE task_instance ti
                SET state = 'none',
                    max_tries = least(ti.try_number::bigint + coalesce((SELECT t.retries FROM task t
                                      WHERE t.dag_id = ti.dag_id AND t.task_id = ti.task_id), 0), 2147483647)::int,
                    start_date = NULL, end_date = NULL, exit_code = NULL, retry_at = NULL, queued_at = NULL,
                    worker_job_id = NULL, hostname = NULL, state_reason = v_reason, updated_at = v_now
                WHERE ti.dag_run_id = v_existing.id AND ti.state IN ('failed', 'upstream_failed');
                UPDATE dag_run r SET state = 'running', end_date = NULL, state_reason = v_reason
                WHERE r.id = v_existing.id AND r.state = 'failed';
                INSERT INTO state_change (at, action, dag_id, run_id, from_state, to_state, reason)
                VALUES (v_now, 'clear', p_dag_id, v_existing.run_id, 'failed', 'running', v_reason);
                v_rerun := v_rerun + 1;
            END IF;
        ELSIF p_max_active IS NULL OR v_active < p_max_active THEN
            INSERT INTO dag_run (dag_id, run_id, run_type, state, logical_date, data_interval_start, data_interval_end,
                                 run_after, conf, created_at)
            VALUES (p_dag_id, 'backfill__' || to_char(v_logical AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"'),
                    'backfill', 'queued', v_logical, v_logical, coalesce(v_next, v_logical), v_now, '{}'::jsonb, v_now);
            v_created := v_created + 1;
            v_active := v_active + 1;
        ELSE
            v_left := v_left + 1;
        END IF;
        v_logical := v_next;
    END LOOP;
    IF v_points = 0 THEN
        RAISE EXCEPTION 'DAG %: its schedule % has no run between % and %', quote_literal(p_dag_id),
            quote_literal(v_dag.schedule), p_start, p_end;
    END IF;
    RETURN QUERY SELECT v_created, v_rerun, v_active, v_left;
END;
$$;
