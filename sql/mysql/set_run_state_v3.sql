-- set_run_state_v3 (MySQL/MariaDB only; PostgreSQL's stays v2): set_run_state_v2 (same
-- arguments, result, contract: read it below) with one change, a fix: ITS MULTI-TABLE STATEMENTS
-- ARE LED BY THE RUN'S TIs, so the call waits for no writer of rows outside the run.
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
-- (STRAIGHT_JOIN): the rows it reads and changes are the run's TIs and, by primary key, their
-- reservations and triggers; so it waits only for writers of those.
-- Lock: v2's (the run's row, then its TIs' rows, FOR UPDATE; then the changed TIs' triggers and
-- the pool_reservation rows of the run's TIs), and no other row.
-- Invariant, callers may assume: v2's.
-- set_run_state_v2: set_run_state_v1 that knows `preempting` (docs/priority.md, operators): a
-- preempting TI (a victim of preempt_v1 whose try is still stopping) is treated as a running
-- one: it becomes `failed` (mark_failed, cancel) or `success` (mark_success), its try ends here
-- (history row), and heartbeat_v3 no longer moves it back to `scheduled` (only `preempting` TIs
-- go back). Its worker was already told to stop it. Every pool_reservation row of the run's TIs
-- is deleted (a TI of a finished run no longer waits, so no slot stays kept for it); a
-- reservation that a preempting TI's slots were freed for (preempted_for, a TI of another run)
-- stays: that TI still waits. Same arguments and result as v1.
-- Lock: as v1 (dag_run row, then its TI rows), then the run's pool_reservation rows.
-- v1's description follows.
-- set_run_state_v2(dag_id, run_id, action, reason, now): `engine runs mark success|failed`
-- (action 'mark_success' / 'mark_failed') and `engine runs cancel` (action 'cancel').
--   * mark_success: every unfinished TI becomes `success`, the run `success`;
--   * mark_failed and cancel: every running, restarting or deferred TI becomes `failed`, every
--     TI that has not started (none, scheduled, queued, up_for_retry) `skipped` (it never
--     starts), the run `failed`. cancel refuses a run that has already finished;
--   * a try that was running or deferred ends here (task_instance_history row); its worker
--     learns it from heartbeat_v2 and stops the process (SIGTERM, SIGKILL after the grace);
--     a deferred TI's trigger is closed with the reason;
--   * each changed TI and the run get a state_change row; run.state_reason = the reason.
-- Returns one row: (state, tis_changed, tries_stopped).
-- Raises (one line, nothing changed) for an unknown DAG or run, an unknown action, a run
-- already in the target state, and cancelling a finished run.
-- Lock: the dag_run row, then its TI rows (FOR UPDATE): schedule_tis's order.
-- Invariant: a run marked or cancelled has no unfinished TI; every change has its history.
-- Callers may assume: one transaction; all or nothing.
-- MySQL: a PROCEDURE whose final SELECT returns the row; the TIs to change are kept in the
-- session TEMPORARY table set_run_state_sel (recreated by every call).
CREATE PROCEDURE set_run_state_v3(IN p_dag_id TEXT, IN p_run_id TEXT, IN p_action TEXT, IN p_reason LONGTEXT,
                                  IN p_now DATETIME(6))
BEGIN
    DECLARE v_now    DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_reason TEXT DEFAULT LEFT(REPLACE(COALESCE(p_reason, CONCAT(REPLACE(p_action, '_', ' '), ' by an operator')),
                                               CHAR(0 USING utf8mb4), ''), 4000);
    DECLARE v_target VARCHAR(20) DEFAULT CASE p_action WHEN 'mark_success' THEN 'success' WHEN 'mark_failed' THEN 'failed'
                                                       WHEN 'cancel' THEN 'failed' END;
    DECLARE v_msg    VARCHAR(128);
    DECLARE v_n      INT;
    DECLARE v_stopped INT;
    DECLARE v_run_id BIGINT;
    DECLARE v_run_state VARCHAR(20);

    IF v_target IS NULL THEN
        SET v_msg = LEFT(CONCAT('unknown run action ', QUOTE(LEFT(COALESCE(p_action, 'NULL'), 40)),
                                '; use mark_success, mark_failed or cancel'), 128);
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
    IF p_action = 'cancel' AND v_run_state NOT IN ('queued', 'running') THEN
        SET v_msg = LEFT(CONCAT('run ', QUOTE(LEFT(p_run_id, 40)), ' has already finished (', v_run_state,
                                '); nothing to cancel'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    IF v_run_state = v_target THEN
        SET v_msg = LEFT(CONCAT('run ', QUOTE(LEFT(p_run_id, 40)), ' is already ', v_target, '; nothing changed'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SELECT COUNT(*) INTO v_n FROM task_instance ti WHERE ti.dag_run_id = v_run_id FOR UPDATE;
    DROP TEMPORARY TABLE IF EXISTS set_run_state_sel;
    CREATE TEMPORARY TABLE set_run_state_sel (ti_id BIGINT PRIMARY KEY, state VARCHAR(20) NOT NULL,
                                              new_state VARCHAR(20) NOT NULL);
    INSERT INTO set_run_state_sel (ti_id, state, new_state)
    SELECT ti.id, ti.state,
           CASE WHEN v_target = 'success' THEN 'success'
                WHEN ti.state IN ('running', 'preempting', 'restarting', 'deferred') THEN 'failed'
                ELSE 'skipped' END
    FROM task_instance ti
    WHERE ti.dag_run_id = v_run_id
      AND ti.state IN ('none', 'scheduled', 'queued', 'running', 'preempting', 'restarting', 'deferred',
                       'up_for_retry');
    SELECT COUNT(*), COALESCE(SUM(CASE WHEN s.state IN ('running', 'preempting', 'deferred') THEN 1 ELSE 0 END), 0)
    INTO v_n, v_stopped FROM set_run_state_sel s;

    INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                       pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                       worker_job_id, log_path, reason)
    SELECT ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, s.new_state, ti.pool, ti.pool_slots,
           ti.queued_at, ti.start_date, v_now, NULL, ti.hostname, ti.worker_job_id, ti.log_path, v_reason
    FROM task_instance ti JOIN set_run_state_sel s ON s.ti_id = ti.id
    WHERE s.state IN ('running', 'preempting', 'deferred');
    UPDATE set_run_state_sel s STRAIGHT_JOIN task_instance ti ON ti.id = s.ti_id
    STRAIGHT_JOIN `trigger` tr ON tr.id = ti.trigger_id
    SET tr.fired_at = v_now, tr.error = v_reason
    WHERE s.state = 'deferred' AND tr.fired_at IS NULL;
    INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                              to_state, reason)
    SELECT v_now, p_action, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, s.state,
           s.new_state, v_reason
    FROM task_instance ti JOIN set_run_state_sel s ON s.ti_id = ti.id;
    UPDATE set_run_state_sel s STRAIGHT_JOIN task_instance ti ON ti.id = s.ti_id
    SET ti.state = s.new_state, ti.start_date = COALESCE(ti.start_date, v_now), ti.end_date = v_now,
        ti.retry_at = NULL, ti.next_method = NULL, ti.next_kwargs = NULL, ti.trigger_id = NULL,
        ti.state_reason = v_reason, ti.updated_at = v_now
    WHERE ti.state = s.state;
    DELETE x FROM task_instance ti STRAIGHT_JOIN pool_reservation x ON x.ti_id = ti.id WHERE ti.dag_run_id = v_run_id;
    UPDATE dag_run r SET r.state = v_target, r.start_date = COALESCE(r.start_date, v_now), r.end_date = v_now,
                         r.state_reason = v_reason
    WHERE r.id = v_run_id AND r.state = v_run_state;
    INSERT INTO state_change (at, action, dag_id, run_id, from_state, to_state, reason)
    VALUES (v_now, p_action, p_dag_id, p_run_id, v_run_state, v_target, v_reason);
    SELECT v_target AS state, v_n AS tis_changed, v_stopped AS tries_stopped;
END
