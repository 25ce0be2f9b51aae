-- heartbeat_v1(job_id, now): a live job says so; its running TIs are stamped with it.
-- Returns false when the job is no longer `running` (another process judged it dead and
-- cleaned up after it): the caller must stop and register again.
-- Lock: the job row and the TI rows it owns (plain row locks, held briefly).
-- MySQL: a FUNCTION that modifies data (MODIFIES SQL DATA): with binary logging on (MySQL 8's
-- default) the server needs log_bin_trust_function_creators = ON to create it. The job is
-- looked up under its row lock rather than judged by ROW_COUNT(), which counts only changed
-- rows unless the client connected with CLIENT_FOUND_ROWS (a repeated `now` changes nothing).
CREATE FUNCTION heartbeat_v1(p_job_id BIGINT, p_now DATETIME(6))
RETURNS BOOLEAN
NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    DECLARE v_now DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_n   INT;
    SELECT COUNT(*) INTO v_n FROM job WHERE id = p_job_id AND state = 'running' FOR UPDATE;
    IF v_n = 0 THEN
        RETURN FALSE;
    END IF;
    UPDATE job SET latest_heartbeat = v_now WHERE id = p_job_id AND state = 'running';
    UPDATE task_instance SET last_heartbeat_at = v_now
    WHERE worker_job_id = p_job_id AND state = 'running';
    RETURN TRUE;
END
