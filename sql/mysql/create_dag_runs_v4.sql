-- create_dag_runs_v4(now, max_per_dag): create_dag_runs_v3 (below) whose started runs are
-- stamped with the moment the decision was made: UTC_TIMESTAMP(6) read after the count of the
-- DAG's running runs (a statement of its own, so after that count saw what other schedulers
-- committed), not when the procedure began. Why: sql/postgresql/create_dag_runs_v4.sql.
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
--   * Each DAG is done after its own SAVEPOINT, in both steps. When it fails, the handler
--     rolls back to it, records the error against the DAG (dag.error_step =
--     'create_dag_runs', error = one line, error_at = now) and the other DAGs go on. The step
--     clears the DAG's create_dag_runs error when it next succeeds for it.
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
-- created and how many it started; no value stored in a dag or task row makes it raise. Call
-- it inside a transaction (the engine's connections have autocommit off): the savepoints need
-- one. Paused, draining (dag.is_draining, or every DAG while deployment.is_draining) or
-- inactive DAGs get no new runs and start none.
--
-- Data intervals are Airflow's: the run with logical date L covers [L, next(L)) and is
-- created once next(L) <= now. Without catchup, only the latest complete interval is run.
--
-- MySQL: a PROCEDURE whose final SELECT returns (runs_created, runs_started); no parameter
-- defaults (the named query passes max_per_dag 16, PostgreSQL's default). SKIP LOCKED needs the
-- engine's READ COMMITTED (docs/dialects.md). No data-modifying CTEs: the runs to start go
-- through a session temporary table; map indexes come from JSON_TABLE (no generate_series).
-- PostgreSQL's BEGIN ... EXCEPTION per DAG is a block with an EXIT HANDLER FOR SQLEXCEPTION
-- and a SAVEPOINT; the DAGs that failed in this call are kept in a session temporary table.
-- Every SELECT ... INTO in the per-DAG blocks returns one row (an aggregate): the NOT FOUND
-- handler of the cursors must only ever see the cursors' end.
CREATE PROCEDURE create_dag_runs_v4(IN p_now DATETIME(6), IN p_max_per_dag INT)
BEGIN
    DECLARE c_horizon  DATETIME(6) DEFAULT '9999-01-01 00:00:00';
    DECLARE v_now      DATETIME(6);
    DECLARE v_start    DATETIME(6);  -- a started run's start_date
    DECLARE v_done     BOOLEAN DEFAULT FALSE;
    DECLARE d_id       VARCHAR(250);
    DECLARE d_schedule VARCHAR(200);
    DECLARE d_zone     VARCHAR(64);
    DECLARE d_start    DATETIME(6);
    DECLARE d_catchup  BOOLEAN;
    DECLARE d_mar      INT;
    DECLARE d_next     DATETIME(6);
    DECLARE v_logical  DATETIME(6);
    DECLARE v_end      DATETIME(6);
    DECLARE v_latest   DATETIME(6);
    DECLARE v_after    DATETIME(6);
    DECLARE v_run_id   VARCHAR(250);
    DECLARE v_room     INT;
    DECLARE v_n        INT;
    DECLARE v_made     INT;
    DECLARE v_created  INT DEFAULT 0;
    DECLARE v_started  INT DEFAULT 0;
    DECLARE v_drain_all BOOLEAN;
    DECLARE v_msg      TEXT;
    DECLARE v_errno    INT;
    -- 1. DAGs with due cron runs.
    DECLARE c_due CURSOR FOR
        SELECT dg.dag_id, dg.schedule, dg.timezone, dg.start_date, dg.catchup, dg.max_active_runs, dg.next_dagrun
        FROM dag dg
        WHERE dg.is_active AND NOT dg.is_paused AND NOT dg.is_draining AND NOT v_drain_all
          AND dg.schedule IS NOT NULL
          AND (dg.next_dagrun_create_after IS NULL OR dg.next_dagrun_create_after <= v_now)
        ORDER BY dg.dag_id
        FOR UPDATE SKIP LOCKED;
    -- 2. DAGs with queued runs.
    DECLARE c_queued CURSOR FOR
        SELECT dg.dag_id, dg.max_active_runs
        FROM dag dg
        WHERE dg.is_active AND NOT dg.is_paused AND NOT dg.is_draining AND NOT v_drain_all
          AND EXISTS (SELECT 1 FROM dag_run r WHERE r.dag_id = dg.dag_id AND r.state = 'queued')
        ORDER BY dg.dag_id
        FOR UPDATE SKIP LOCKED;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET p_max_per_dag = COALESCE(p_max_per_dag, 16);
    SELECT COALESCE(MAX(dp.is_draining), FALSE) INTO v_drain_all FROM deployment dp;
    CREATE TEMPORARY TABLE IF NOT EXISTS create_dag_runs_v4_start (id BIGINT PRIMARY KEY);
    CREATE TEMPORARY TABLE IF NOT EXISTS create_dag_runs_v4_bad (dag_id VARCHAR(250) PRIMARY KEY);
    DELETE FROM create_dag_runs_v4_bad;

    OPEN c_due;
    due: LOOP
        SET v_done = FALSE;
        FETCH c_due INTO d_id, d_schedule, d_zone, d_start, d_catchup, d_mar, d_next;
        IF v_done THEN
            LEAVE due;
        END IF;
        one_due: BEGIN
            DECLARE EXIT HANDLER FOR SQLEXCEPTION
            BEGIN
                GET DIAGNOSTICS CONDITION 1 v_msg = MESSAGE_TEXT, v_errno = MYSQL_ERRNO;
                ROLLBACK TO SAVEPOINT create_dag_runs_v4_dag;
                INSERT INTO create_dag_runs_v4_bad (dag_id) VALUES (d_id) ON DUPLICATE KEY UPDATE dag_id = dag_id;
                UPDATE dag SET error_step = 'create_dag_runs', error_at = v_now,
                               error = LEFT(REGEXP_REPLACE(CONCAT('creating runs: ', COALESCE(v_msg, '?'),
                                                                  ' [error ', COALESCE(v_errno, '?'), ']'),
                                                           '[[:space:]]+', ' '), 4000)
                WHERE dag_id = d_id;
            END;
            SAVEPOINT create_dag_runs_v4_dag;
            SET v_made = 0;
            SELECT COUNT(*) INTO v_n FROM dag_run r WHERE r.dag_id = d_id AND r.state IN ('queued', 'running');
            SET v_room = LEAST(COALESCE(d_mar - v_n, p_max_per_dag), p_max_per_dag);
            -- The first logical date is the first fire time at or after start_date.
            SET v_logical = COALESCE(d_next, cron_next_v3(d_schedule, d_zone, d_start - INTERVAL 1 SECOND));
            IF NOT d_catchup THEN
                -- Jump to the start of the latest interval that has ended by now.
                SET v_latest = cron_prev_v3(d_schedule, d_zone, cron_prev_v3(d_schedule, d_zone, v_now) - INTERVAL 1 MINUTE);
                IF v_latest IS NOT NULL AND v_latest > v_logical THEN
                    SET v_logical = v_latest;
                END IF;
            END IF;
            IF v_logical >= c_horizon THEN  -- a next_dagrun stored by hand
                SET v_logical = NULL;
            END IF;
            runs: WHILE v_room > 0 AND v_logical IS NOT NULL DO
                SET v_end = cron_next_v3(d_schedule, d_zone, v_logical);
                IF v_end IS NULL OR v_end > v_now THEN
                    LEAVE runs;
                END IF;
                SET v_run_id = CONCAT('scheduled__', DATE_FORMAT(v_logical, '%Y-%m-%dT%H:%i:%s+00:00'));
                -- PostgreSQL: ON CONFLICT DO NOTHING. INSERT IGNORE would hide other errors too.
                SELECT COUNT(*) INTO v_n FROM dag_run r WHERE r.dag_id = d_id AND r.run_id = v_run_id;
                IF v_n = 0 THEN
                    INSERT INTO dag_run (dag_id, run_id, run_type, state, logical_date, data_interval_start,
                                         data_interval_end, run_after, conf, created_at)
                    VALUES (d_id, v_run_id, 'scheduled', 'queued', v_logical, v_logical, v_end, v_end, '{}', v_now);
                    SET v_made = v_made + 1;
                END IF;
                SET v_room = v_room - 1;
                SET v_logical = v_end;
            END WHILE;
            SET v_after = cron_next_v3(d_schedule, d_zone, v_logical);
            IF v_after IS NULL THEN  -- no run ends before the horizon: never fires again
                UPDATE dag SET next_dagrun = NULL, next_dagrun_create_after = NULL,
                               error_step = 'create_dag_runs', error_at = v_now,
                               error = LEFT(REGEXP_REPLACE(CONCAT(
                                   'schedule ', d_schedule, ' has no run that ends before 9999-01-01 after ',
                                   COALESCE(v_logical, d_next, d_start, 'NULL'), ' (start_date ', COALESCE(d_start, 'NULL'),
                                   '); no new runs: fix the schedule or start_date and sync the DAG'),
                                   '[[:space:]]+', ' '), 4000)
                WHERE dag_id = d_id;
                INSERT INTO create_dag_runs_v4_bad (dag_id) VALUES (d_id) ON DUPLICATE KEY UPDATE dag_id = dag_id;
            ELSE
                -- Left to right: the error columns are tested before error_step is cleared.
                UPDATE dag SET next_dagrun = v_logical, next_dagrun_create_after = v_after,
                               error = CASE WHEN error_step = 'create_dag_runs' THEN NULL ELSE error END,
                               error_at = CASE WHEN error_step = 'create_dag_runs' THEN NULL ELSE error_at END,
                               error_step = CASE WHEN error_step = 'create_dag_runs' THEN NULL ELSE error_step END
                WHERE dag_id = d_id;
            END IF;
            RELEASE SAVEPOINT create_dag_runs_v4_dag;
            SET v_created = v_created + v_made;
        END one_due;
    END LOOP;
    CLOSE c_due;

    -- 2. Start queued runs, oldest first, up to max_active_runs per DAG.
    OPEN c_queued;
    queued: LOOP
        SET v_done = FALSE;
        FETCH c_queued INTO d_id, d_mar;
        IF v_done THEN
            LEAVE queued;
        END IF;
        one_queued: BEGIN
            DECLARE EXIT HANDLER FOR SQLEXCEPTION
            BEGIN
                GET DIAGNOSTICS CONDITION 1 v_msg = MESSAGE_TEXT, v_errno = MYSQL_ERRNO;
                ROLLBACK TO SAVEPOINT create_dag_runs_v4_dag;
                INSERT INTO create_dag_runs_v4_bad (dag_id) VALUES (d_id) ON DUPLICATE KEY UPDATE dag_id = dag_id;
                UPDATE dag SET error_step = 'create_dag_runs', error_at = v_now,
                               error = LEFT(REGEXP_REPLACE(CONCAT('starting runs: ', COALESCE(v_msg, '?'),
                                                                  ' [error ', COALESCE(v_errno, '?'), ']'),
                                                           '[[:space:]]+', ' '), 4000)
                WHERE dag_id = d_id;
            END;
            SAVEPOINT create_dag_runs_v4_dag;
            SELECT COUNT(*) INTO v_n FROM dag_run r WHERE r.dag_id = d_id AND r.state = 'running';
            SET v_start = COALESCE(p_now, UTC_TIMESTAMP(6));  -- after the count: see the header
            -- PostgreSQL: LIMIT NULL (no max_active_runs) means no limit.
            SET v_room = CASE WHEN d_mar IS NULL THEN 2147483647 ELSE GREATEST(d_mar - v_n, 0) END;
            DELETE FROM create_dag_runs_v4_start;
            INSERT INTO create_dag_runs_v4_start (id)
            SELECT r.id FROM dag_run r
            WHERE r.dag_id = d_id AND r.state = 'queued'
            ORDER BY r.run_after, r.id
            LIMIT v_room;
            UPDATE create_dag_runs_v4_start s
            STRAIGHT_JOIN dag_run r ON s.id = r.id
            SET r.state = 'running', r.start_date = v_start
            WHERE r.state = 'queued';
            SET v_n = ROW_COUNT();
            -- One TI per task, per map index for mapped tasks (0 .. map_count - 1, at most 100,000
            -- as engine/validate.py allows, else -1).
            INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, max_tries,
                                       priority_weight, pool, pool_slots, queue, executor, run_after, updated_at)
            SELECT r.id, r.dag_id, r.run_id, t.task_id, CASE WHEN t.map_count IS NULL THEN -1 ELSE m.i - 1 END,
                   'none', t.retries, t.priority_weight, t.pool, t.pool_slots, t.queue, t.executor, r.run_after, v_now
            FROM create_dag_runs_v4_start s
            JOIN dag_run r ON r.id = s.id AND r.state = 'running' AND r.start_date = v_start
            JOIN task t ON t.dag_id = r.dag_id AND t.is_active
            JOIN JSON_TABLE(CASE WHEN COALESCE(t.map_count, 1) <= 0 THEN '[]'
                                 ELSE CONCAT('[', REPEAT('0,', LEAST(COALESCE(t.map_count, 1), 100000) - 1), '0]') END,  -- MAX_MAP_LENGTH
                            '$[*]' COLUMNS (i FOR ORDINALITY)) m;
            UPDATE dag d SET d.error = NULL, d.error_at = NULL, d.error_step = NULL
            WHERE d.dag_id = d_id AND d.error_step = 'create_dag_runs'
              AND NOT EXISTS (SELECT 1 FROM create_dag_runs_v4_bad b WHERE b.dag_id = d_id);
            RELEASE SAVEPOINT create_dag_runs_v4_dag;
            SET v_started = v_started + v_n;
        END one_queued;
    END LOOP;
    CLOSE c_queued;
    DELETE FROM create_dag_runs_v4_start;

    SELECT v_created AS runs_created, v_started AS runs_started;
END
