-- set_job_queues_v1(job_id, queues): a worker records the queues it claims from (job.queues, read
-- by `engine status --check`). A function so a worker role needs only EXECUTE (engine db roles).
-- Lock: the job row. MySQL: a FUNCTION that modifies data (see heartbeat_v1 about binary logging).
CREATE FUNCTION set_job_queues_v1(p_job_id BIGINT, p_queues TEXT)
RETURNS INT
NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    UPDATE job SET queues = p_queues WHERE id = p_job_id;
    RETURN ROW_COUNT();
END
