-- create_dag_runs_v4(now, max_per_dag): create_dag_runs_v3 (below: the same arguments, result,
-- lock and rules) whose started runs are stamped with the moment the decision was made.
--
-- New in v4: a started run's start_date is clock_timestamp(), read inside the statement that
-- counts the DAG's running runs and starts queued ones (after its snapshot), not now(), the
-- start of the transaction. The transaction may begin before another scheduler's
-- schedule_tis finishes a run of the DAG (end_date = that transaction's start) and commits;
-- the count then sees that run finished, and v3 stamped the new run with a start_date before
-- the finished run's end_date: the two overlapped on paper, one run more than max_active_runs
-- (seen by tests/test_chaos.py's sweep over start/end dates), though never at any instant in
-- the database. With a p_now given (tests inject time), p_now is the stamp, as in v3.
--
-- create_dag_runs_v4(now, max_per_dag): create the cron runs that are due and start queued
-- runs (cron and manual) as far as each DAG's max_active_runs allows.
--
-- New in v3: the cron schedule is read in the DAG's time zone (dag.timezone, an IANA name,
-- 'UTC' by default): fire times come from cron_next_v3 / cron_prev_v3, which read the zone's
-- offsets from tz_offset (DST as croniter: a fire time in a skipped local hour fires at the
-- transition, one in a repeated hour twice). Logical dates, data intervals and run ids stay
-- UTC instants. A zone without rows in tz_offset is recorded against the DAG as an error.
--
-- From v2: one DAG can no longer stop run creation for everyone.
--   * Each DAG is done in its own subtransaction (BEGIN ... EXCEPTION), in both steps. When
--     it fails, its changes are rolled back, the error is recorded against the DAG
--     (dag.error_step = 'create_dag_runs', error = one line, error_at = now) and the other
--     DAGs go on. The step clears the DAG's create_dag_runs error when it next succeeds for it.
--   * No run date, next_dagrun or next_dagrun_create_after at or past 9999-01-01 is written
--     (Python cannot read years past 9999, MySQL's DATETIME ends there): fire times come from
--     cron_next_v3 (cron_next_v2 before v3), which returns NULL at that horizon. A DAG whose schedule has no next run
--     before it (a start_date in year 9999, a cron that never fires) never fires again: its
--     next_dagrun and next_dagrun_create_after are set NULL and the DAG's error says so, every
--     pass, until a sync changes its schedule or start date.
--
-- Lock: the `dag` rows it works on, FOR UPDATE SKIP LOCKED. Two schedulers never work on the
-- same DAG at once, and one that finds a DAG locked skips it (the other is doing it).
-- Invariants: no run is created twice (unique (dag_id, run_id) and the dag row lock); a DAG
-- never has more than max_active_runs runs `running`; a started run has exactly one TI per
-- task (per map index for mapped tasks), in state 'none'; a DAG's work in a pass is all done
-- or not at all.
-- Callers may assume: it never waits on another scheduler; it returns how many runs it
-- created and how many it started; no value stored in a dag or task row makes it raise.
-- Paused, draining (dag.is_draining, or every DAG while deployment.is_draining) or inactive
-- DAGs get no new runs and start none.
--
-- Data intervals are Airflow's: the run with logical date L covers [L, next(L)) and is
-- created once next(L) <= now. Without catchup, only the latest complete interval is run.
CREATE OR REPLACE FUNCTION create_dag_runs_v4(p_now timestamptz DEFAULT NULL, p_max_per_dag int DEFAULT 16)
RETURNS TABLE (runs_created int, runs_started int)
LANGUAGE plpgsql
AS $$
DECLARE
    c_horizon  CONSTANT timestamptz := '9999-01-01 00:00:00+00';
    v_now      timestamptz := coalesce(p_now, now());
    d          record;
    v_logical  timestamptz;
    v_end      timestamptz;
    v_latest   timestamptz;
    v_after    timestamptz;
    v_room     int;
    v_n        int;
    v_made     int;
    v_created  int := 0;
    v_started  int := 0;
    v_drain_all boolean;
    v_bad      text[] := '{}';  -- DAGs that failed in this call: step 2 must not clear their error
BEGIN
    SELECT coalesce(bool_or(dp.is_draining), false) INTO v_drain_all FROM deployment dp;

    -- 1. Due cron runs.
    FOR d IN
        SELECT dg.dag_id, dg.schedule, dg.timezone, dg.start_date, dg.catchup, dg.max_active_runs, dg.next_dagrun
        FROM dag dg
        WHERE dg.is_active AND NOT dg.is_paused AND NOT dg.is_draining AND NOT v_drain_all
          AND dg.schedule IS NOT NULL
          AND (dg.next_dagrun_create_after IS NULL OR dg.next_dagrun_create_after <= v_now)
        ORDER BY dg.dag_id
        FOR UPDATE SKIP LOCKED
    LOOP
        BEGIN
            v_made := 0;
            SELECT count(*) INTO v_n FROM dag_run r WHERE r.dag_id = d.dag_id AND r.state IN ('queued', 'running');
            v_room := least(coalesce(d.max_active_runs - v_n, p_max_per_dag), p_max_per_dag);
            -- The first logical date is the first fire time at or after start_date.
            v_logical := coalesce(d.next_dagrun, cron_next_v3(d.schedule, d.timezone, d.start_date - interval '1 second'));
            IF NOT d.catchup THEN
                -- Jump to the start of the latest interval that has ended by now.
                v_latest := cron_prev_v3(d.schedule, d.timezone, cron_prev_v3(d.schedule, d.timezone, v_now) - interval '1 minute');
                IF v_latest IS NOT NULL AND v_latest > v_logical THEN
                    v_logical := v_latest;
                END IF;
            END IF;
            IF v_logical >= c_horizon THEN  -- a next_dagrun stored by an older version or by hand
                v_logical := NULL;
            END IF;
            WHILE v_room > 0 AND v_logical IS NOT NULL LOOP
                v_end := cron_next_v3(d.schedule, d.timezone, v_logical);
                EXIT WHEN v_end IS NULL OR v_end > v_now;
                INSERT INTO dag_run (dag_id, run_id, run_type, state, logical_date, data_interval_start,
                                     data_interval_end, run_after, conf, created_at)
                VALUES (d.dag_id,
                        'scheduled__' || to_char(v_logical AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"'),
                        'scheduled', 'queued', v_logical, v_logical, v_end, v_end, '{}'::jsonb, v_now)
                ON CONFLICT (dag_id, run_id) DO NOTHING;
                GET DIAGNOSTICS v_n = ROW_COUNT;
                v_made := v_made + v_n;
                v_room := v_room - 1;
                v_logical := v_end;
            END LOOP;
            v_after := cron_next_v3(d.schedule, d.timezone, v_logical);
            IF v_after IS NULL THEN  -- no run ends before the horizon: never fires again
                UPDATE dag SET next_dagrun = NULL, next_dagrun_create_after = NULL,
                               error_step = 'create_dag_runs', error_at = v_now,
                               error = left(regexp_replace(format(
                                   'schedule %s has no run that ends before 9999-01-01 after %s (start_date %s); '
                                   'no new runs: fix the schedule or start_date and sync the DAG',
                                   d.schedule, coalesce(v_logical, d.next_dagrun, d.start_date), d.start_date),
                                   '\s+', ' ', 'g'), 4000)
                WHERE dag.dag_id = d.dag_id;
                v_bad := v_bad || d.dag_id;
            ELSE
                UPDATE dag SET next_dagrun = v_logical, next_dagrun_create_after = v_after,
                               error_step = CASE WHEN dag.error_step = 'create_dag_runs' THEN NULL ELSE dag.error_step END,
                               error = CASE WHEN dag.error_step = 'create_dag_runs' THEN NULL ELSE dag.error END,
                               error_at = CASE WHEN dag.error_step = 'create_dag_runs' THEN NULL ELSE dag.error_at END
                WHERE dag.dag_id = d.dag_id;
            END IF;
            v_created := v_created + v_made;
        EXCEPTION WHEN OTHERS THEN
            v_bad := v_bad || d.dag_id;
            UPDATE dag SET error_step = 'create_dag_runs', error_at = v_now,
                           error = left(regexp_replace(format('creating runs: %s [SQLSTATE %s]', SQLERRM, SQLSTATE),
                                                       '\s+', ' ', 'g'), 4000)
            WHERE dag.dag_id = d.dag_id;
        END;
    END LOOP;

    -- 2. Start queued runs, oldest first, up to max_active_runs per DAG.
    FOR d IN
        SELECT dg.dag_id, dg.max_active_runs
        FROM dag dg
        WHERE dg.is_active AND NOT dg.is_paused AND NOT dg.is_draining AND NOT v_drain_all
          AND EXISTS (SELECT 1 FROM dag_run r WHERE r.dag_id = dg.dag_id AND r.state = 'queued')
        ORDER BY dg.dag_id
        FOR UPDATE SKIP LOCKED
    LOOP
        BEGIN
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
                UPDATE dag_run r SET state = 'running', start_date = coalesce(p_now, clock_timestamp())
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
                    FROM generate_series(0, least(coalesce(t.map_count, 1), 100000) - 1) AS g  -- MAX_MAP_LENGTH
                ) m
            )
            -- A data-modifying CTE always runs to completion, referenced or not.
            SELECT count(*) INTO v_n FROM started;
            UPDATE dag SET error_step = NULL, error = NULL, error_at = NULL
            WHERE dag.dag_id = d.dag_id AND dag.error_step = 'create_dag_runs' AND NOT dag.dag_id = ANY (v_bad);
            v_started := v_started + v_n;
        EXCEPTION WHEN OTHERS THEN
            v_bad := v_bad || d.dag_id;
            UPDATE dag SET error_step = 'create_dag_runs', error_at = v_now,
                           error = left(regexp_replace(format('starting runs: %s [SQLSTATE %s]', SQLERRM, SQLSTATE),
                                                       '\s+', ' ', 'g'), 4000)
            WHERE dag.dag_id = d.dag_id;
        END;
    END LOOP;

    RETURN QUERY SELECT v_created, v_started;
END;
$$;
