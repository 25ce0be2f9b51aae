-- heartbeat_v4(job_id, running, now): on MySQL/MariaDB, heartbeat_v3 (read sql/mysql/heartbeat_v3.sql,
-- and sql/postgresql/heartbeat_v3.sql for the contract) with one change, a fix: THE JOB'S
-- RESTARTING AND PREEMPTING TIs ARE LOCKED BEFORE THEY ARE READ.
--   v3 picked them with plain reads (READ COMMITTED: the last committed version, no lock) and
--   then wrote the history, the state_change rows and the new state from that pick; its final
--   UPDATE of a preempting TI did not check the state again. A transaction changing such a TI at
--   that moment (an operator's mark success, clear or kill, a Defer of the preempted try reported
--   on another connection) held the row: v3 read the old `preempting`, its UPDATE waited for the
--   row, and once that transaction committed it overwrote the new state: a TI marked success went
--   back to `scheduled` and ran again, a deferred one lost its trigger (tests/test_priority.py,
--   "a heartbeat and an operator's change of a preempting TI"). PostgreSQL's v3 locks them in the
--   statement that picks them (FOR UPDATE re-checks the state), so it has no v4.
--   Here both picks are locking reads (FOR UPDATE): each waits for such a transaction and then
--   reads the state that committed (a TI no longer restarting or preempting is not taken), and
--   every statement after a pick reads rows this call holds, which nothing else can change until
--   it commits.
-- Lock: the job row (FOR UPDATE), then the job's restarting and preempting TI rows (FOR UPDATE),
-- until the caller commits.
-- Invariant: v3's, and a restarting or preempting TI moves only from the state it has when it is
-- locked. Callers may assume: v3's.
CREATE PROCEDURE heartbeat_v4(IN p_job_id BIGINT, IN p_running JSON, IN p_now DATETIME(6))
BEGIN
    DECLARE v_now DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_n   INT;
    DECLARE v_running JSON DEFAULT COALESCE(p_running, '[]');
    SELECT COUNT(*) INTO v_n FROM job WHERE id = p_job_id AND state = 'running' FOR UPDATE;
    IF v_n = 0 THEN
        SELECT CAST(NULL AS SIGNED) AS ti_id, CAST(NULL AS SIGNED) AS try_number, 'dead' AS state,
               CAST(NULL AS CHAR) AS reason;
    ELSE
        UPDATE job SET latest_heartbeat = v_now WHERE id = p_job_id AND state = 'running';
        UPDATE task_instance SET last_heartbeat_at = v_now
        WHERE worker_job_id = p_job_id AND state = 'running';

        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        SELECT v_now, 'restarted', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, 'restarting',
               'none', 'the cleared try has stopped'
        FROM task_instance ti
        WHERE ti.worker_job_id = p_job_id AND ti.state = 'restarting'
          AND NOT EXISTS (SELECT 1 FROM JSON_TABLE(v_running, '$[*]' COLUMNS (ti_id BIGINT PATH '$[0]',
                                                                             try_number INT PATH '$[1]')) m
                          WHERE m.ti_id = ti.id AND m.try_number = ti.try_number)
        FOR UPDATE;   -- (v4: locked as they are picked; the UPDATE below moves the rows held)
        UPDATE task_instance ti
        SET ti.state = 'none', ti.worker_job_id = NULL, ti.hostname = NULL, ti.updated_at = v_now
        WHERE ti.worker_job_id = p_job_id AND ti.state = 'restarting'
          AND NOT EXISTS (SELECT 1 FROM JSON_TABLE(v_running, '$[*]' COLUMNS (ti_id BIGINT PATH '$[0]',
                                                                             try_number INT PATH '$[1]')) m
                          WHERE m.ti_id = ti.id AND m.try_number = ti.try_number);

        CREATE TEMPORARY TABLE IF NOT EXISTS heartbeat_v4_stopped (id BIGINT PRIMARY KEY);
        DELETE FROM heartbeat_v4_stopped;
        INSERT INTO heartbeat_v4_stopped (id)
        SELECT ti.id FROM task_instance ti
        WHERE ti.worker_job_id = p_job_id AND ti.state = 'preempting'
          AND NOT EXISTS (SELECT 1 FROM JSON_TABLE(v_running, '$[*]' COLUMNS (ti_id BIGINT PATH '$[0]',
                                                                             try_number INT PATH '$[1]')) m
                          WHERE m.ti_id = ti.id AND m.try_number = ti.try_number)
        FOR UPDATE;   -- (v4: locked as they are picked; every statement below reads rows held)
        INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                           pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                           worker_job_id, log_path, reason)
        SELECT v.id, v.dag_id, v.run_id, v.task_id, v.map_index, v.try_number, 'preempted', v.pool, v.pool_slots,
               v.queued_at, v.start_date, v_now, NULL, v.hostname, v.worker_job_id, v.log_path, v.state_reason
        FROM heartbeat_v4_stopped s JOIN task_instance v ON v.id = s.id;
        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        SELECT v_now, 'preempted', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, 'preempting',
               'scheduled', 'the preempted try has stopped'
        FROM heartbeat_v4_stopped s JOIN task_instance ti ON ti.id = s.id;
        UPDATE heartbeat_v4_stopped s STRAIGHT_JOIN task_instance ti ON ti.id = s.id
        SET ti.state = 'scheduled', ti.max_tries = ti.max_tries + 1, ti.end_date = v_now, ti.exit_code = NULL,
            ti.queued_at = NULL, ti.queued_by_job_id = NULL, ti.retry_at = NULL, ti.worker_job_id = NULL,
            ti.hostname = NULL, ti.updated_at = v_now;

        SELECT CAST(NULL AS SIGNED) AS ti_id, CAST(NULL AS SIGNED) AS try_number, 'alive' AS state,
               CAST(NULL AS CHAR) AS reason
        UNION ALL
        SELECT m.ti_id, m.try_number, COALESCE(ti.state, 'gone'), ti.state_reason
        FROM JSON_TABLE(v_running, '$[*]' COLUMNS (ti_id BIGINT PATH '$[0]', try_number INT PATH '$[1]')) m
        LEFT JOIN task_instance ti ON ti.id = m.ti_id
        WHERE ti.id IS NULL OR NOT (ti.state = 'running' AND ti.try_number = m.try_number
                                    AND ti.worker_job_id = p_job_id);
    END IF;
END
