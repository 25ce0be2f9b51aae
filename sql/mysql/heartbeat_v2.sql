-- heartbeat_v2(job_id, running, now): a live worker says so and learns which of its tries to
-- stop. `running` is a JSON array of the [ti_id, try_number] pairs the worker runs now.
-- Returns a first row (NULL, NULL, 'alive' or 'dead', NULL): 'dead' when the job is no longer
-- `running` (another process judged it dead; the caller must stop, as with heartbeat_v1).
-- Then, when alive, one row (ti_id, try_number, state, reason) per pair of `running` whose TI
-- is no longer running that try for this job: an operator cleared, marked, killed or cancelled
-- it (or its run). The worker stops each such try (SIGTERM, SIGKILL after the grace); its
-- later report is stale and changes nothing (finish_ti is a compare-and-set).
-- A TI in `restarting` (cleared while running) that this job owns and no longer runs (not in
-- `running`: its try has ended) goes back to `none` for a new try, with a state_change row.
-- As heartbeat_v1: stamps job.latest_heartbeat and the running TIs' last_heartbeat_at.
-- Lock: the job row (FOR UPDATE), then the TI rows it owns (row locks, held briefly).
-- Invariant: a restarting TI goes back to `none` only once its try's process is gone (the
-- worker no longer lists it).
-- Callers may assume: a malformed `running` raises; nothing else does for stored values.
-- MySQL: a PROCEDURE whose final SELECT returns the rows; the pairs are read with JSON_TABLE.
CREATE PROCEDURE heartbeat_v2(IN p_job_id BIGINT, IN p_running JSON, IN p_now DATETIME(6))
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
                          WHERE m.ti_id = ti.id AND m.try_number = ti.try_number);
        UPDATE task_instance ti
        SET ti.state = 'none', ti.worker_job_id = NULL, ti.hostname = NULL, ti.updated_at = v_now
        WHERE ti.worker_job_id = p_job_id AND ti.state = 'restarting'
          AND NOT EXISTS (SELECT 1 FROM JSON_TABLE(v_running, '$[*]' COLUMNS (ti_id BIGINT PATH '$[0]',
                                                                             try_number INT PATH '$[1]')) m
                          WHERE m.ti_id = ti.id AND m.try_number = ti.try_number);

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
