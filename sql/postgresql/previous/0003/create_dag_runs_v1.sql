-- create_dag_runs_v1(now, max_per_dag): create the cron runs that are due and start queued
-- runs (cron and manual) as far as each DAG's max_active_runs allows.
--
-- Lock: the `dag` rows it works on, FOR UPDATE SKIP LOCKED. Two schedulers never work on the
-- same DAG at once, and one that finds a DAG locked skips it (the other is doing it).
-- Invariants: no run is created twice (unique (dag_id, run_id) and the dag row lock); a DAG
-- never has more than max_active_runs runs `running`; a started run has exactly one TI per
-- task (per map index for mapped tasks), in state 'none'.
-- Callers may assume: it never waits on another scheduler; it returns how many runs it
-- created and how many it started. Paused or inactive DAGs get no new runs and start none.
--
-- Data intervals are Airflow's: the run with logical date L covers [L, next(L)) and is
-- created once next(L) <= now. Without catchup, only the latest complete interval is run.
CREATE OR REPLACE FUNCTION create_dag_runs_v1(p_now timestamptz DEFAULT NULL, p_max_per_dag int DEFAULT 16)
RETURNS TABLE (runs_created int, runs_started int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    d          record;
    v_logical  timestamptz;
    v_end      timestamptz;
    v_latest   timestamptz;
    v_room     int;
    v_n        int;
    v_created  int := 0;
    v_started  int := 0;
BEGIN
    -- 1. Due cron runs.
    FOR d IN
        SELECT dg.dag_id, dg.schedule, dg.start_date, dg.catchup, dg.max_active_runs, dg.next_dagrun
        FROM dag dg
        WHERE dg.is_active AND NOT dg.is_paused AND dg.schedule IS NOT NULL
          AND (dg.next_dagrun_create_after IS NULL OR dg.next_dagrun_create_after <= v_now)
        ORDER BY dg.dag_id
        FOR UPDATE SKIP LOCKED
    LOOP
        SELECT count(*) INTO v_n FROM dag_run r WHERE r.dag_id = d.dag_id AND r.state IN ('queued', 'running');
        v_room := least(coalesce(d.max_active_runs - v_n, p_max_per_dag), p_max_per_dag);
        -- The first logical date is the first fire time at or after start_date.
        v_logical := coalesce(d.next_dagrun, cron_next_v1(d.schedule, d.start_date - interval '1 second'));
        IF NOT d.catchup THEN
            -- Jump to the start of the latest interval that has ended by now.
            v_latest := cron_prev_v1(d.schedule, cron_prev_v1(d.schedule, v_now) - interval '1 minute');
            IF v_latest IS NOT NULL AND v_latest > v_logical THEN
                v_logical := v_latest;
            END IF;
        END IF;
        WHILE v_room > 0 AND v_logical IS NOT NULL LOOP
            v_end := cron_next_v1(d.schedule, v_logical);
            EXIT WHEN v_end IS NULL OR v_end > v_now;
            INSERT INTO dag_run (dag_id, run_id, run_type, state, logical_date, data_interval_start,
                                 data_interval_end, run_after, conf, created_at)
            VALUES (d.dag_id,
                    'scheduled__' || to_char(v_logical AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"'),
                    'scheduled', 'queued', v_logical, v_logical, v_end, v_end, '{}'::jsonb, v_now)
            ON CONFLICT (dag_id, run_id) DO NOTHING;
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_created := v_created + v_n;
            v_room := v_room - 1;
            v_logical := v_end;
        END LOOP;
        UPDATE dag SET next_dagrun = v_logical,
                       next_dagrun_create_after = cron_next_v1(d.schedule, v_logical)
        WHERE dag.dag_id = d.dag_id;
    END LOOP;

    -- 2. Start queued runs, oldest first, up to max_active_runs per DAG.
    FOR d IN
        SELECT dg.dag_id, dg.max_active_runs
        FROM dag dg
        WHERE dg.is_active AND NOT dg.is_paused
          AND EXISTS (SELECT 1 FROM dag_run r WHERE r.dag_id = dg.dag_id AND r.state = 'queued')
        ORDER BY dg.dag_id
        FOR UPDATE SKIP LOCKED
    LOOP
        WITH room AS (
            SELECT d.max_active_runs - count(*) AS n
            FROM dag_run r WHERE r.dag_id = d.dag_id AND r.state = 'running'
        ), starting AS (
            SELECT r.id
            FROM dag_run r
            WHERE r.dag_id = d.dag_id AND r.state = 'queued'
            ORDER BY r.run_after, r.id
            LIMIT (SELECT CASE WHEN d.max_active_runs IS NULL THEN NULL ELSE greatest(n, 0) END FROM room)
        ), started AS (
            UPDATE dag_run r SET state = 'running', start_date = v_now
            FROM starting s WHERE r.id = s.id AND r.state = 'queued'
            RETURNING r.id, r.dag_id, r.run_id, r.run_after
        ), created AS (  -- one TI per task, per map index for mapped tasks
            INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, max_tries,
                                       priority_weight, pool, pool_slots, queue, executor, run_after, updated_at)
            SELECT s.id, s.dag_id, s.run_id, t.task_id, m.map_index, 'none', t.retries,
                   t.priority_weight, t.pool, t.pool_slots, t.queue, t.executor, s.run_after, v_now
            FROM started s
            JOIN task t ON t.dag_id = s.dag_id AND t.is_active
            CROSS JOIN LATERAL (
                SELECT CASE WHEN t.map_count IS NULL THEN -1 ELSE g END AS map_index
                FROM generate_series(0, coalesce(t.map_count, 1) - 1) AS g
            ) m
        )
        -- A data-modifying CTE always runs to completion, referenced or not.
        SELECT count(*) INTO v_n FROM started;
        v_started := v_started + v_n;
    END LOOP;

    RETURN QUERY SELECT v_created, v_started;
END;
$$;
