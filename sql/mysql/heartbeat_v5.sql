-- heartbeat_v5(job_id, running, now): on MySQL/MariaDB, heartbeat_v4 (read sql/mysql/heartbeat_v4.sql,
-- and sql/postgresql/heartbeat_v3.sql for the contract) with one change, a fix: A RESTARTING TI
-- IS MOVED ONLY IF THE PICK THAT WROTE ITS state_change ROW TOOK IT.
--   v4 wrote the `restarted` rows from one locking read and then moved the TIs with an UPDATE
--   that read them again. A TI of the job that became `restarting` in between (an operator's
--   clear of a preempting TI, committed while v4's pick waited for another restarting TI that
--   another transaction held) was moved to `none` without its row (tests/test_priority.py,
--   "a TI cleared while a heartbeat picks its restarting TIs"). Here one locking read picks
--   the job's restarting and preempting TIs that `running` no longer lists into a table, with
--   the state each had when it was locked; every statement after it writes from that table.
--   A TI that becomes restarting after the pick is left for the next heartbeat.
-- Lock: the job row (FOR UPDATE), then the job's restarting and preempting TI rows that
-- `running` no longer lists (FOR UPDATE, the pick), until the caller commits.
-- Invariant: v4's, and every restarting TI this call moves to `none` has its `restarted` row
-- (every preempting TI it moves, its history and `preempted` rows). Callers may assume: v4's.
CREATE PROCEDURE heartbeat_v5(IN p_job_id BIGINT, IN p_running JSON, IN p_now DATETIME(6))
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

        -- The pick: the job's tries that have stopped, locked, with the state each was locked in.
        CREATE TEMPORARY TABLE IF NOT EXISTS heartbeat_v5_stopped (id BIGINT PRIMARY KEY,
                                                                   state VARCHAR(20) NOT NULL);
        DELETE FROM heartbeat_v5_stopped;
        INSERT INTO heartbeat_v5_stopped (id, state)
        SELECT ti.id, ti.state FROM task_instance ti
        WHERE ti.worker_job_id = p_job_id AND ti.state IN ('restarting', 'preempting')
          AND NOT EXISTS (SELECT 1 FROM JSON_TABLE(v_running, '$[*]' COLUMNS (ti_id BIGINT PATH '$[0]',
                                                                             try_number INT PATH '$[1]')) m
                          WHERE m.ti_id = ti.id AND m.try_number = ti.try_number)
        FOR UPDATE;

        -- A cleared try has stopped: the TI goes back to `none` for a new try.
        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        SELECT v_now, 'restarted', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, 'restarting',
               'none', 'the cleared try has stopped'
        FROM heartbeat_v5_stopped s JOIN task_instance ti ON ti.id = s.id
        WHERE s.state = 'restarting';
        UPDATE heartbeat_v5_stopped s STRAIGHT_JOIN task_instance ti ON ti.id = s.id
        SET ti.state = 'none', ti.worker_job_id = NULL, ti.hostname = NULL, ti.updated_at = v_now
        WHERE s.state = 'restarting';

        -- A preempted try has stopped: the TI goes back to `scheduled`, its try not counted.
        INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                           pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                           worker_job_id, log_path, reason)
        SELECT v.id, v.dag_id, v.run_id, v.task_id, v.map_index, v.try_number, 'preempted', v.pool, v.pool_slots,
               v.queued_at, v.start_date, v_now, NULL, v.hostname, v.worker_job_id, v.log_path, v.state_reason
        FROM heartbeat_v5_stopped s JOIN task_instance v ON v.id = s.id
        WHERE s.state = 'preempting';
        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        SELECT v_now, 'preempted', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, 'preempting',
               'scheduled', 'the preempted try has stopped'
        FROM heartbeat_v5_stopped s JOIN task_instance ti ON ti.id = s.id
        WHERE s.state = 'preempting';
        UPDATE heartbeat_v5_stopped s STRAIGHT_JOIN task_instance ti ON ti.id = s.id
        SET ti.state = 'scheduled', ti.max_tries = ti.max_tries + 1, ti.end_date = v_now, ti.exit_code = NULL,
            ti.queued_at = NULL, ti.queued_by_job_id = NULL, ti.retry_at = NULL, ti.worker_job_id = NULL,
            ti.hostname = NULL, ti.updated_at = v_now
        WHERE s.state = 'preempting';

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
