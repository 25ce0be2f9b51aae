-- finish_job_v1(job_id, now): a clean shutdown; the job is finished, not dead. Returns 1 when
-- the job was running, 0 otherwise (another process had judged it dead).
-- Lock: the job row (compare-and-set on state = 'running').
-- MySQL: a FUNCTION that modifies data (see heartbeat_v1 about binary logging).
CREATE FUNCTION finish_job_v1(p_job_id BIGINT, p_now DATETIME(6))
RETURNS INT
NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    UPDATE job SET state = 'success', end_date = COALESCE(p_now, UTC_TIMESTAMP(6))
    WHERE id = p_job_id AND state = 'running';
    RETURN ROW_COUNT();
END
