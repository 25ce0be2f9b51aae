-- previous/0003/create_dag_runs_v1.sql: create_dag_runs_v1 as revisions 0001 and 0002 install
-- it and as the downgrade of 0003 puts it back. No MySQL text older than 0003 exists (the MySQL
-- port was written after 0003's changes), so this is sql/mysql/create_dag_runs_v1.sql with
-- exactly 0003's changes taken out (no drain checks), as `git diff 9f4dc93 ca90e4f --
-- sql/postgresql/create_dag_runs_v1.sql` shows them for PostgreSQL (whose text before 0003 is
-- sql/postgresql/previous/0003/create_dag_runs_v1.sql).
--
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
--
-- MySQL: a PROCEDURE whose final SELECT returns (runs_created, runs_started); no parameter
-- defaults (the named query passes max_per_dag 16, PostgreSQL's default). SKIP LOCKED needs the
-- engine's READ COMMITTED (docs/dialects.md). No data-modifying CTEs: the runs to start go
-- through a session temporary table; map indexes come from JSON_TABLE (no generate_series).
CREATE PROCEDURE create_dag_runs_v1(IN p_now DATETIME(6), IN p_max_per_dag INT)
BEGIN
    DECLARE v_now      DATETIME(6);
    DECLARE v_done     BOOLEAN DEFAULT FALSE;
    DECLARE d_id       VARCHAR(250);
    DECLARE d_schedule VARCHAR(200);
    DECLARE d_start    DATETIME(6);
    DECLARE d_catchup  BOOLEAN;
    DECLARE d_mar      INT;
    DECLARE d_next     DATETIME(6);
    DECLARE v_logical  DATETIME(6);
    DECLARE v_end      DATETIME(6);
    DECLARE v_latest   DATETIME(6);
    DECLARE v_run_id   VARCHAR(250);
    DECLARE v_room     INT;
    DECLARE v_n        INT;
    DECLARE v_created  INT DEFAULT 0;
    DECLARE v_started  INT DEFAULT 0;
    -- 1. DAGs with due cron runs.
    DECLARE c_due CURSOR FOR
        SELECT dg.dag_id, dg.schedule, dg.start_date, dg.catchup, dg.max_active_runs, dg.next_dagrun
        FROM dag dg
        WHERE dg.is_active AND NOT dg.is_paused AND dg.schedule IS NOT NULL
          AND (dg.next_dagrun_create_after IS NULL OR dg.next_dagrun_create_after <= v_now)
        ORDER BY dg.dag_id
        FOR UPDATE SKIP LOCKED;
    -- 2. DAGs with queued runs.
    DECLARE c_queued CURSOR FOR
        SELECT dg.dag_id, dg.max_active_runs
        FROM dag dg
        WHERE dg.is_active AND NOT dg.is_paused
          AND EXISTS (SELECT 1 FROM dag_run r WHERE r.dag_id = dg.dag_id AND r.state = 'queued')
        ORDER BY dg.dag_id
        FOR UPDATE SKIP LOCKED;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET p_max_per_dag = COALESCE(p_max_per_dag, 16);
    CREATE TEMPORARY TABLE IF NOT EXISTS create_dag_runs_v1_start (id BIGINT PRIMARY KEY);

    OPEN c_due;
    due: LOOP
        SET v_done = FALSE;
        FETCH c_due INTO d_id, d_schedule, d_start, d_catchup, d_mar, d_next;
        IF v_done THEN
            LEAVE due;
        END IF;
        SELECT COUNT(*) INTO v_n FROM dag_run r WHERE r.dag_id = d_id AND r.state IN ('queued', 'running');
        SET v_room = LEAST(COALESCE(d_mar - v_n, p_max_per_dag), p_max_per_dag);
        -- The first logical date is the first fire time at or after start_date.
        SET v_logical = COALESCE(d_next, cron_next_v1(d_schedule, d_start - INTERVAL 1 SECOND));
        IF NOT d_catchup THEN
            -- Jump to the start of the latest interval that has ended by now.
            SET v_latest = cron_prev_v1(d_schedule, cron_prev_v1(d_schedule, v_now) - INTERVAL 1 MINUTE);
            IF v_latest IS NOT NULL AND v_latest > v_logical THEN
                SET v_logical = v_latest;
            END IF;
        END IF;
        runs: WHILE v_room > 0 AND v_logical IS NOT NULL DO
            SET v_end = cron_next_v1(d_schedule, v_logical);
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
                SET v_created = v_created + 1;
            END IF;
            SET v_room = v_room - 1;
            SET v_logical = v_end;
        END WHILE;
        UPDATE dag SET next_dagrun = v_logical,
                       next_dagrun_create_after = cron_next_v1(d_schedule, v_logical)
        WHERE dag.dag_id = d_id;
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
        SELECT COUNT(*) INTO v_n FROM dag_run r WHERE r.dag_id = d_id AND r.state = 'running';
        -- PostgreSQL: LIMIT NULL (no max_active_runs) means no limit.
        SET v_room = CASE WHEN d_mar IS NULL THEN 2147483647 ELSE GREATEST(d_mar - v_n, 0) END;
        DELETE FROM create_dag_runs_v1_start;
        INSERT INTO create_dag_runs_v1_start (id)
        SELECT r.id FROM dag_run r
        WHERE r.dag_id = d_id AND r.state = 'queued'
        ORDER BY r.run_after, r.id
        LIMIT v_room;
        UPDATE create_dag_runs_v1_start s
        STRAIGHT_JOIN dag_run r ON s.id = r.id
        SET r.state = 'running', r.start_date = v_now
        WHERE r.state = 'queued';
        SET v_started = v_started + ROW_COUNT();
        -- One TI per task, per map index for mapped tasks (0 .. map_count - 1, else -1).
        INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, max_tries,
                                   priority_weight, pool, pool_slots, queue, executor, run_after, updated_at)
        SELECT r.id, r.dag_id, r.run_id, t.task_id, CASE WHEN t.map_count IS NULL THEN -1 ELSE m.i - 1 END,
               'none', t.retries, t.priority_weight, t.pool, t.pool_slots, t.queue, t.executor, r.run_after, v_now
        FROM create_dag_runs_v1_start s
        JOIN dag_run r ON r.id = s.id AND r.state = 'running' AND r.start_date = v_now
        JOIN task t ON t.dag_id = r.dag_id AND t.is_active
        JOIN JSON_TABLE(CASE WHEN COALESCE(t.map_count, 1) <= 0 THEN '[]'
                             ELSE CONCAT('[', REPEAT('0,', COALESCE(t.map_count, 1) - 1), '0]') END,
                        '$[*]' COLUMNS (i FOR ORDINALITY)) m;
    END LOOP;
    CLOSE c_queued;
    DELETE FROM create_dag_runs_v1_start;

    SELECT v_created AS runs_created, v_started AS runs_started;
END
