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
-- MySQL: a PROCEDURE whose final SELECT returns the row; no interval arithmetic with
-- fractional seconds (MICROSECOND).
CREATE PROCEDURE backfill_v2(IN p_dag_id TEXT, IN p_start DATETIME(6), IN p_end DATETIME(6), IN p_max_active INT,
                             IN p_rerun_failed BOOLEAN, IN p_now DATETIME(6))
BEGIN
    DECLARE v_now      DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_reason   TEXT DEFAULT 'backfill --rerun-failed';
    DECLARE v_msg      VARCHAR(128);
    DECLARE v_n        INT;
    DECLARE v_schedule VARCHAR(200);
    DECLARE v_zone     VARCHAR(64);
    DECLARE v_logical  DATETIME(6);
    DECLARE v_next     DATETIME(6);
    DECLARE v_run_id   BIGINT;
    DECLARE v_run_name VARCHAR(250);
    DECLARE v_run_state VARCHAR(20);
    DECLARE v_active   INT;
    DECLARE v_created  INT DEFAULT 0;
    DECLARE v_rerun    INT DEFAULT 0;
    DECLARE v_left     INT DEFAULT 0;
    DECLARE v_points   INT DEFAULT 0;

    IF p_start IS NULL OR p_end IS NULL OR p_start > p_end THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'backfill: --end is before --start; give a start on or before the end';
    END IF;
    IF p_start < '1970-01-01 00:00:00' OR p_end > '2999-12-31 23:59:59' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'backfill: dates must be from 1970-01-01 to 2999-12-31';
    END IF;
    IF p_max_active IS NOT NULL AND p_max_active < 1 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'backfill: --max-active-runs must be at least 1';
    END IF;
    SELECT COUNT(*), MAX(d.schedule), MAX(d.timezone) INTO v_n, v_schedule, v_zone FROM dag d WHERE d.dag_id = p_dag_id AND d.is_active FOR UPDATE;
    IF v_n = 0 THEN
        SET v_msg = LEFT(CONCAT('unknown DAG ', QUOTE(LEFT(p_dag_id, 40)),
                                ': not synced or no longer in the DAG files; see `engine dags list`'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    IF v_schedule IS NULL THEN
        SET v_msg = LEFT(CONCAT('DAG ', QUOTE(LEFT(p_dag_id, 40)),
                                ' has no schedule, so nothing to backfill; use `engine dags trigger --logical-date`'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SELECT COUNT(*) INTO v_active FROM dag_run r
    WHERE r.dag_id = p_dag_id AND r.run_type = 'backfill' AND r.state IN ('queued', 'running');

    SET v_logical = cron_next_v3(v_schedule, v_zone, p_start - INTERVAL 1 MICROSECOND);
    WHILE v_logical IS NOT NULL AND v_logical <= p_end DO
        SET v_points = v_points + 1;
        SET v_next = cron_next_v3(v_schedule, v_zone, v_logical);
        SET v_run_id = NULL;
        SELECT MIN(r.id) INTO v_run_id FROM dag_run r WHERE r.dag_id = p_dag_id AND r.logical_date = v_logical;
        IF v_run_id IS NOT NULL THEN
            SELECT r.state, r.run_id INTO v_run_state, v_run_name FROM dag_run r WHERE r.id = v_run_id FOR UPDATE;
            IF COALESCE(p_rerun_failed, FALSE) AND v_run_state = 'failed' THEN
                SELECT COUNT(*) INTO v_n FROM task_instance ti WHERE ti.dag_run_id = v_run_id FOR UPDATE;
                INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number,
                                          from_state, to_state, reason)
                SELECT v_now, 'clear', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, ti.state,
                       'none', v_reason
                FROM task_instance ti
                WHERE ti.dag_run_id = v_run_id AND ti.state IN ('failed', 'upstream_failed');
                UPDATE task_instance ti LEFT JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
                SET ti.state = 'none', ti.max_tries = LEAST(ti.try_number + COALESCE(t.retries, 0), 2147483647),
                    ti.start_date = NULL, ti.end_date = NULL, ti.exit_code = NULL, ti.retry_at = NULL,
                    ti.queued_at = NULL, ti.worker_job_id = NULL, ti.hostname = NULL, ti.state_reason = v_reason,
                    ti.updated_at = v_now
                WHERE ti.dag_run_id = v_run_id AND ti.state IN ('failed', 'upstream_failed');
                UPDATE dag_run r SET r.state = 'running', r.end_date = NULL, r.state_reason = v_reason
                WHERE r.id = v_run_id AND r.state = 'failed';
                INSERT INTO state_change (at, action, dag_id, run_id, from_state, to_state, reason)
                VALUES (v_now, 'clear', p_dag_id, v_run_name, 'failed', 'running', v_reason);
                SET v_rerun = v_rerun + 1;
            END IF;
        ELSEIF p_max_active IS NULL OR v_active < p_max_active THEN
            INSERT INTO dag_run (dag_id, run_id, run_type, state, logical_date, data_interval_start, data_interval_end,
                                 run_after, conf, created_at)
            VALUES (p_dag_id, CONCAT('backfill__', DATE_FORMAT(v_logical, '%Y-%m-%dT%H:%i:%s+00:00')), 'backfill',
                    'queued', v_logical, v_logical, COALESCE(v_next, v_logical), v_now, '{}', v_now);
            SET v_created = v_created + 1;
            SET v_active = v_active + 1;
        ELSE
            SET v_left = v_left + 1;
        END IF;
        SET v_logical = v_next;
    END WHILE;
    IF v_points = 0 THEN
        SET v_msg = LEFT(CONCAT('DAG ', QUOTE(LEFT(p_dag_id, 40)), ': its schedule has no run between ',
                                DATE_FORMAT(p_start, '%Y-%m-%d %H:%i'), ' and ', DATE_FORMAT(p_end, '%Y-%m-%d %H:%i')), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SELECT v_created AS created, v_rerun AS rerun, v_active AS active, v_left AS remaining;
END
