-- register_job_v1(kind, hostname, pid, now): a scheduler, worker or triggerer process announces
-- itself; returns its job id. A function (not a plain INSERT) so a worker or triggerer role
-- needs only EXECUTE (engine db roles). MySQL: a FUNCTION that modifies data (see heartbeat_v1
-- about binary logging).
-- Lock: none beyond the new row.
CREATE FUNCTION register_job_v1(p_kind VARCHAR(20), p_hostname VARCHAR(250), p_pid INT, p_now DATETIME(6))
RETURNS BIGINT
NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    DECLARE v_now DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    INSERT INTO job (kind, hostname, pid, state, start_date, latest_heartbeat)
    VALUES (p_kind, p_hostname, p_pid, 'running', v_now, v_now);
    RETURN LAST_INSERT_ID();
END
