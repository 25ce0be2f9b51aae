-- clear_tis_v4 (MySQL/MariaDB only): clear_tis_v2 (same arguments, result, contract: read it
-- below) with one change, a fix: ITS MULTI-TABLE STATEMENTS ARE LED BY THE SELECTION, so the call
-- waits for no writer of rows outside it. (clear_tis_v3 is PostgreSQL's, another fix; this
-- dialect goes from v2 to v4 so that a version number names one change.)
-- Why: InnoDB reads every table of a multi-table UPDATE or DELETE that the statement does not
-- change with shared locks, READ COMMITTED or not, and takes the rows of the table it changes with
-- exclusive locks as it reads them; v2 left the join order of those statements to the optimizer.
-- Measured on MariaDB 10.11 (50,000 scheduled TIs, 10 reservations of another DAG's TIs, the
-- operator's session with innodb_lock_wait_timeout = 3): with one reservation row inserted and
-- not committed by another transaction (a scheduler's queue_tis call reserving slots),
-- clear_tis_v2 and set_run_state_v2 scanned pool_reservation and waited for it until error 1205;
-- with another DAG's TI updated and not committed (a worker finishing it), set_run_state_v2
-- waited for it too (its delete read the TI of every reservation). The wait ends when the other
-- transaction does, so it costs the operator a few ms usually, but a scan that holds
-- pool_reservation rows and waits while a scheduler waits for the operator's TIs is a deadlock
-- (InnoDB rolls one back). Here each such statement is led by what this call selected
-- (STRAIGHT_JOIN): the rows it reads and changes are the selection's and, by primary key, their
-- reservations, triggers and tasks; so it waits only for writers of those.
-- Lock: v2's (the DAG's run rows in scope, then the selected TIs' rows, FOR UPDATE; then the
-- cleared TIs' triggers, tasks (shared) and pool_reservation rows), and no other row.
-- Invariant, callers may assume: v2's.
-- clear_tis_v2: clear_tis_v1 that knows `preempting` (docs/priority.md, operators): a
-- preempting TI (a victim of preempt_v1 whose try is still stopping) is cleared as a running
-- one: to `restarting` while its worker lives (heartbeat_v3 moves it to `none` once the try has
-- stopped, never back to `scheduled`), else to `none`; its try ends here (history row). The
-- pool_reservation row of each cleared TI is deleted (a cleared TI waits again from `none`;
-- queue_tis may reserve for it again later); a reservation that a preempting TI's slots were
-- freed for (preempted_for) stays: that TI still waits. Same arguments and result as v1.
-- Lock: as v1 (run rows, then TI rows), then the cleared TIs' pool_reservation rows.
-- v1's description follows.
-- clear_tis_v2(dag_id, run_id, task_regex, downstream, upstream, only_failed, dry_run, reason,
-- now): `engine tasks clear`. Selects the TIs to clear and, unless dry_run, clears them.
-- Selection (Airflow's `tasks clear`): the DAG's active tasks whose id matches task_regex (a
-- regular expression, searched; NULL: every task), plus every task downstream and/or
-- upstream of them (transitively) when asked; their TIs in run run_id (NULL: every run of the
-- DAG) that are not `none` or `removed` (nothing to clear); with only_failed, only the
-- `failed` and `upstream_failed` ones.
-- Clearing a TI (compare-and-set on the state read under the row lock):
--   * it gets a new try: max_tries = try_number + the task's retries, and back to `none`, so
--     schedule_tis decides it again by its trigger rule;
--   * a `running` TI whose worker is alive goes to `restarting`: heartbeat_v2 tells the worker
--     to stop the try, and moves the TI to `none` once it has stopped (so the new try never
--     overlaps the old one); its try is recorded as ended in task_instance_history;
--   * a `running` TI whose worker is gone, or a `deferred` one, goes straight to `none` (the
--     try is recorded as ended; a deferred TI's trigger is closed with an error);
--   * one state_change row per TI (action 'clear'), one per run it reopens.
-- Runs with a cleared TI that had finished (success, failed) go back to `running`.
-- Returns one row per selected TI: (ti_id, run_id, task_id, map_index, state, new_state).
-- Raises (one line, nothing changed) for an unknown DAG, an unknown run, a regex that matches
-- no task or is malformed.
-- Lock: the DAG's dag_run rows in scope, then the TI rows of the selected tasks (FOR UPDATE),
-- the same order as schedule_tis (run rows, then TIs): no deadlock with a scheduler.
-- Invariant: a cleared TI never runs two tries at once; every change has its history row.
-- Callers may assume: one transaction; with dry_run nothing is written.
-- MySQL: a PROCEDURE whose final SELECT returns the rows. The selection is kept in session
-- TEMPORARY tables (clear_tis_seed, clear_tis_tasks, clear_tis_sel; recreated by every call);
-- multi-table UPDATEs read the new state from clear_tis_sel, never from a column the same
-- statement assigns (MySQL's assignment order). MariaDB reports a bad regex as error 1139.
CREATE PROCEDURE clear_tis_v4(IN p_dag_id TEXT, IN p_run_id TEXT, IN p_task_regex TEXT, IN p_downstream BOOLEAN,
                              IN p_upstream BOOLEAN, IN p_only_failed BOOLEAN, IN p_dry_run BOOLEAN,
                              IN p_reason LONGTEXT, IN p_now DATETIME(6))
BEGIN
    DECLARE v_now    DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_reason TEXT DEFAULT LEFT(REPLACE(COALESCE(p_reason, 'cleared by an operator'), CHAR(0 USING utf8mb4), ''),
                                       4000);
    DECLARE v_dry    BOOLEAN DEFAULT COALESCE(p_dry_run, FALSE);
    DECLARE v_msg    VARCHAR(128);
    DECLARE v_n      INT;
    DECLARE EXIT HANDLER FOR 1139
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'bad --task regular expression; see the MariaDB/MySQL REGEXP syntax';

    SELECT COUNT(*) INTO v_n FROM dag d WHERE d.dag_id = p_dag_id;
    IF v_n = 0 THEN
        SET v_msg = LEFT(CONCAT('unknown DAG ', QUOTE(LEFT(p_dag_id, 60)), '; see `engine dags list`'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    IF p_run_id IS NOT NULL THEN
        SELECT COUNT(*) INTO v_n FROM dag_run r WHERE r.dag_id = p_dag_id AND r.run_id = p_run_id;
        IF v_n = 0 THEN
            SET v_msg = LEFT(CONCAT('DAG ', QUOTE(LEFT(p_dag_id, 40)), ' has no run ', QUOTE(LEFT(p_run_id, 40)),
                                    '; see `engine runs list`'), 128);
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
        END IF;
    END IF;

    DROP TEMPORARY TABLE IF EXISTS clear_tis_seed;
    DROP TEMPORARY TABLE IF EXISTS clear_tis_tasks;
    DROP TEMPORARY TABLE IF EXISTS clear_tis_sel;
    CREATE TEMPORARY TABLE clear_tis_seed (task_id VARCHAR(250) PRIMARY KEY);
    CREATE TEMPORARY TABLE clear_tis_tasks (task_id VARCHAR(250) PRIMARY KEY);
    CREATE TEMPORARY TABLE clear_tis_sel (ti_id BIGINT PRIMARY KEY, dag_run_id BIGINT NOT NULL,
                                          state VARCHAR(20) NOT NULL, new_state VARCHAR(20) NOT NULL);
    INSERT INTO clear_tis_seed
    SELECT t.task_id FROM task t
    WHERE t.dag_id = p_dag_id AND t.is_active AND (p_task_regex IS NULL OR t.task_id REGEXP p_task_regex);
    SELECT COUNT(*) INTO v_n FROM clear_tis_seed;
    IF v_n = 0 THEN
        SET v_msg = LEFT(CONCAT('no task of DAG ', QUOTE(LEFT(p_dag_id, 40)), ' matches --task ',
                                QUOTE(LEFT(COALESCE(p_task_regex, ''), 40)), '; see `engine tasks list`'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    INSERT INTO clear_tis_tasks SELECT s.task_id FROM clear_tis_seed s;
    -- Downstream and upstream of the matched tasks (not upstream of their downstream).
    IF COALESCE(p_downstream, FALSE) THEN
        INSERT IGNORE INTO clear_tis_tasks
        SELECT x.task_id FROM (
            WITH RECURSIVE down (task_id) AS (
                SELECT s.task_id FROM clear_tis_seed s
                UNION
                SELECT dep.task_id FROM task_dependency dep JOIN down ON dep.upstream_task_id = down.task_id
                WHERE dep.dag_id = p_dag_id
            )
            SELECT down.task_id FROM down
        ) x;
    END IF;
    IF COALESCE(p_upstream, FALSE) THEN
        INSERT IGNORE INTO clear_tis_tasks
        SELECT x.task_id FROM (
            WITH RECURSIVE up (task_id) AS (
                SELECT s.task_id FROM clear_tis_seed s
                UNION
                SELECT dep.upstream_task_id FROM task_dependency dep JOIN up ON dep.task_id = up.task_id
                WHERE dep.dag_id = p_dag_id
            )
            SELECT up.task_id FROM up
        ) x;
    END IF;

    IF NOT v_dry THEN  -- lock: run rows, then TI rows
        SELECT COUNT(*) INTO v_n FROM dag_run r
        WHERE r.dag_id = p_dag_id AND (p_run_id IS NULL OR r.run_id = p_run_id) FOR UPDATE;
        SELECT COUNT(*) INTO v_n FROM task_instance ti
        WHERE ti.dag_id = p_dag_id AND (p_run_id IS NULL OR ti.run_id = p_run_id)
          AND ti.task_id IN (SELECT c.task_id FROM clear_tis_tasks c) FOR UPDATE;
    END IF;
    INSERT INTO clear_tis_sel (ti_id, dag_run_id, state, new_state)
    SELECT ti.id, ti.dag_run_id, ti.state,
           CASE WHEN ti.state IN ('running', 'preempting')
                     AND EXISTS (SELECT 1 FROM job j WHERE j.id = ti.worker_job_id AND j.state = 'running')
                THEN 'restarting'
                WHEN ti.state = 'restarting' THEN 'restarting'
                ELSE 'none' END
    FROM task_instance ti
    WHERE ti.dag_id = p_dag_id AND (p_run_id IS NULL OR ti.run_id = p_run_id)
      AND ti.task_id IN (SELECT c.task_id FROM clear_tis_tasks c)
      AND ti.state NOT IN ('none', 'removed')
      AND (NOT COALESCE(p_only_failed, FALSE) OR ti.state IN ('failed', 'upstream_failed'));

    IF NOT v_dry THEN
        -- The try in progress ends here (history first: it copies columns the UPDATE clears).
        INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                           pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                           worker_job_id, log_path, reason)
        SELECT ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, 'failed', ti.pool, ti.pool_slots,
               ti.queued_at, ti.start_date, v_now, NULL, ti.hostname, ti.worker_job_id, ti.log_path, v_reason
        FROM task_instance ti JOIN clear_tis_sel s ON s.ti_id = ti.id
        WHERE s.state IN ('running', 'preempting', 'deferred');
        UPDATE clear_tis_sel s STRAIGHT_JOIN task_instance ti ON ti.id = s.ti_id
        STRAIGHT_JOIN `trigger` tr ON tr.id = ti.trigger_id
        SET tr.fired_at = v_now, tr.error = v_reason
        WHERE s.state = 'deferred' AND tr.fired_at IS NULL;
        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        SELECT v_now, 'clear', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, s.state,
               s.new_state, v_reason
        FROM task_instance ti JOIN clear_tis_sel s ON s.ti_id = ti.id;
        UPDATE clear_tis_sel s
        STRAIGHT_JOIN task_instance ti ON ti.id = s.ti_id
        LEFT JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
        SET ti.state = s.new_state,
            ti.max_tries = LEAST(ti.try_number + COALESCE(t.retries, 0), 2147483647),
            ti.start_date = NULL, ti.end_date = NULL, ti.exit_code = NULL, ti.retry_at = NULL, ti.queued_at = NULL,
            ti.queued_by_job_id = NULL, ti.next_method = NULL, ti.next_kwargs = NULL, ti.trigger_id = NULL,
            ti.worker_job_id = CASE WHEN s.new_state = 'restarting' THEN ti.worker_job_id END,
            ti.hostname = CASE WHEN s.new_state = 'restarting' THEN ti.hostname END,
            ti.state_reason = v_reason, ti.updated_at = v_now
        WHERE ti.state = s.state;
        DELETE x FROM clear_tis_sel s STRAIGHT_JOIN pool_reservation x ON x.ti_id = s.ti_id;
        INSERT INTO state_change (at, action, dag_id, run_id, from_state, to_state, reason)
        SELECT v_now, 'clear', r.dag_id, r.run_id, r.state, 'running', v_reason
        FROM dag_run r
        WHERE r.id IN (SELECT s.dag_run_id FROM clear_tis_sel s) AND r.state IN ('success', 'failed');
        UPDATE dag_run r SET r.state = 'running', r.end_date = NULL, r.state_reason = v_reason
        WHERE r.id IN (SELECT s.dag_run_id FROM clear_tis_sel s) AND r.state IN ('success', 'failed');
    END IF;

    SELECT s.ti_id, ti.run_id, ti.task_id, ti.map_index, s.state, s.new_state
    FROM clear_tis_sel s JOIN task_instance ti ON ti.id = s.ti_id
    ORDER BY s.ti_id;
END
