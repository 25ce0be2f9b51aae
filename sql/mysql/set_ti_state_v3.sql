-- set_ti_state_v3 (MySQL/MariaDB only; PostgreSQL's stays v2): set_ti_state_v2 (same
-- arguments, result, contract: read it below) with one change, a fix: ITS MULTI-TABLE STATEMENTS
-- ARE LED BY THE SELECTION, so the call waits for no writer of rows outside it.
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
-- reservations and triggers; so it waits only for writers of those.
-- (set_ti_state_v2's statements, alike in shape to clear_tis_v2's, did not wait in that
-- measurement; their order was the optimizer's choice all the same.)
-- Lock: v2's (the run's row, then the selected TIs' rows, FOR UPDATE; then the changed TIs'
-- triggers and pool_reservation rows), and no other row.
-- Invariant, callers may assume: v2's.
-- set_ti_state_v2: set_ti_state_v1 that knows `preempting` (docs/priority.md, operators): a
-- preempting TI (a victim of preempt_v1 whose try is still stopping) is treated as a running
-- one: `kill` changes it, its try ends here (history row with the new state), and heartbeat_v3
-- no longer moves it back to `scheduled`. Its worker was already told to stop it. The
-- pool_reservation row of each changed TI is deleted (a TI killed or marked no longer waits);
-- a reservation that a preempting TI's slots were freed for (preempted_for) stays: that TI
-- still waits. Same arguments and result as v1.
-- Lock: as v1 (dag_run row, then the TI rows), then the changed TIs' pool_reservation rows.
-- v1's description follows.
-- set_ti_state_v2(dag_id, run_id, task_id, map_index, new_state, action, reason, now):
-- `engine tasks mark success|failed` (action 'mark_success' / 'mark_failed') and
-- `engine tasks kill` (action 'kill', new_state 'failed'): the TIs of task_id in the run
-- (map_index NULL: every map index) become new_state, each a compare-and-set on the state
-- read under its row lock, with a state_change row.
--   * `kill` changes only unfinished TIs (none, scheduled, queued, running, restarting,
--     deferred, up_for_retry): queued and scheduled ones never start;
--   * a `running` (or `deferred`) TI's try ends here: a task_instance_history row with the new
--     state and the reason; its worker learns it from heartbeat_v2 and stops the process
--     (SIGTERM, SIGKILL after the grace), and its late report changes nothing. A deferred
--     TI's trigger is closed with the reason as its error;
--   * a TI already in new_state is left alone;
--   * a finished run (success, failed) with a changed TI goes back to `running`, so
--     schedule_tis decides its downstream TIs and its final state again.
-- Returns (ti_id, map_index, state, new_state) per changed TI.
-- Raises (one line, nothing changed) for an unknown DAG, run, task or map index, a new_state
-- other than success/failed, and when no TI needs the change (e.g. killing a finished TI).
-- Lock: the dag_run row, then the TI rows (FOR UPDATE): schedule_tis's order.
-- Invariant: every changed TI has its state_change row; an ended try its history row.
-- Callers may assume: one transaction; all the TIs change or none.
-- MySQL: a PROCEDURE whose final SELECT returns the rows; the selection is kept in the session
-- TEMPORARY table set_ti_state_sel (recreated by every call).
CREATE PROCEDURE set_ti_state_v3(IN p_dag_id TEXT, IN p_run_id TEXT, IN p_task_id TEXT, IN p_map_index INT,
                                 IN p_new_state TEXT, IN p_action TEXT, IN p_reason LONGTEXT, IN p_now DATETIME(6))
BEGIN
    DECLARE v_now    DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_reason TEXT DEFAULT LEFT(REPLACE(COALESCE(p_reason, CONCAT(p_action, ' by an operator')),
                                               CHAR(0 USING utf8mb4), ''), 4000);
    DECLARE v_msg    VARCHAR(128);
    DECLARE v_n      INT;
    DECLARE v_run_id BIGINT;
    DECLARE v_run_state VARCHAR(20);

    IF p_new_state IS NULL OR p_new_state NOT IN ('success', 'failed') THEN
        SET v_msg = LEFT(CONCAT('a TI can be marked success or failed, not ', QUOTE(LEFT(COALESCE(p_new_state, 'NULL'), 40))), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SELECT COUNT(*) INTO v_n FROM dag d WHERE d.dag_id = p_dag_id;
    IF v_n = 0 THEN
        SET v_msg = LEFT(CONCAT('unknown DAG ', QUOTE(LEFT(p_dag_id, 60)), '; see `engine dags list`'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SELECT MAX(r.id), MAX(r.state) INTO v_run_id, v_run_state FROM dag_run r
    WHERE r.dag_id = p_dag_id AND r.run_id = p_run_id FOR UPDATE;
    IF v_run_id IS NULL THEN
        SET v_msg = LEFT(CONCAT('DAG ', QUOTE(LEFT(p_dag_id, 40)), ' has no run ', QUOTE(LEFT(p_run_id, 40)),
                                '; see `engine runs list`'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SELECT COUNT(*) INTO v_n FROM task_instance ti
    WHERE ti.dag_run_id = v_run_id AND ti.task_id = p_task_id AND (p_map_index IS NULL OR ti.map_index = p_map_index)
    FOR UPDATE;
    IF v_n = 0 THEN
        SET v_msg = LEFT(CONCAT('run ', QUOTE(LEFT(p_run_id, 30)), ' has no TI of task ', QUOTE(LEFT(p_task_id, 30)),
                                CASE WHEN p_map_index IS NULL THEN '' ELSE CONCAT(' with map index ', p_map_index) END,
                                '; see `engine tasks list`'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    DROP TEMPORARY TABLE IF EXISTS set_ti_state_sel;
    CREATE TEMPORARY TABLE set_ti_state_sel (ti_id BIGINT PRIMARY KEY, state VARCHAR(20) NOT NULL);
    INSERT INTO set_ti_state_sel (ti_id, state)
    SELECT ti.id, ti.state FROM task_instance ti
    WHERE ti.dag_run_id = v_run_id AND ti.task_id = p_task_id AND (p_map_index IS NULL OR ti.map_index = p_map_index)
      AND ti.state <> p_new_state
      AND (p_action <> 'kill'
           OR ti.state IN ('none', 'scheduled', 'queued', 'running', 'preempting', 'restarting', 'deferred',
                           'up_for_retry'));
    SELECT COUNT(*) INTO v_n FROM set_ti_state_sel;
    IF v_n = 0 THEN
        SET v_msg = LEFT(CONCAT('nothing to change: every TI of task ', QUOTE(LEFT(p_task_id, 40)), ' is already ',
                                CASE WHEN p_action = 'kill' THEN 'finished' ELSE p_new_state END), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;

    INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                       pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                       worker_job_id, log_path, reason)
    SELECT ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, p_new_state, ti.pool, ti.pool_slots,
           ti.queued_at, ti.start_date, v_now, NULL, ti.hostname, ti.worker_job_id, ti.log_path, v_reason
    FROM task_instance ti JOIN set_ti_state_sel s ON s.ti_id = ti.id
    WHERE s.state IN ('running', 'preempting', 'deferred');
    UPDATE set_ti_state_sel s STRAIGHT_JOIN task_instance ti ON ti.id = s.ti_id
    STRAIGHT_JOIN `trigger` tr ON tr.id = ti.trigger_id
    SET tr.fired_at = v_now, tr.error = v_reason
    WHERE s.state = 'deferred' AND tr.fired_at IS NULL;
    INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                              to_state, reason)
    SELECT v_now, p_action, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, s.state,
           p_new_state, v_reason
    FROM task_instance ti JOIN set_ti_state_sel s ON s.ti_id = ti.id;
    UPDATE set_ti_state_sel s STRAIGHT_JOIN task_instance ti ON ti.id = s.ti_id
    SET ti.state = p_new_state, ti.start_date = COALESCE(ti.start_date, v_now), ti.end_date = v_now,
        ti.retry_at = NULL, ti.next_method = NULL, ti.next_kwargs = NULL, ti.trigger_id = NULL,
        ti.state_reason = v_reason, ti.updated_at = v_now
    WHERE ti.state = s.state;
    DELETE x FROM set_ti_state_sel s STRAIGHT_JOIN pool_reservation x ON x.ti_id = s.ti_id;
    IF v_run_state IN ('success', 'failed') THEN
        UPDATE dag_run r SET r.state = 'running', r.end_date = NULL, r.state_reason = v_reason
        WHERE r.id = v_run_id AND r.state = v_run_state;
        INSERT INTO state_change (at, action, dag_id, run_id, from_state, to_state, reason)
        VALUES (v_now, p_action, p_dag_id, p_run_id, v_run_state, 'running', v_reason);
    END IF;
    SELECT s.ti_id, ti.map_index, s.state, p_new_state AS new_state
    FROM set_ti_state_sel s JOIN task_instance ti ON ti.id = s.ti_id
    ORDER BY s.ti_id;
END
