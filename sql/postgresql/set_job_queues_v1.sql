-- set_job_queues_v1(job_id, queues): a worker records the queues it claims from (job.queues, read
-- by `engine status --check`). A function so a worker role needs only EXECUTE (engine db roles).
-- Lock: the job row.
CREATE OR REPLACE FUNCTION set_job_queues_v1(p_job_id bigint, p_queues text)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_n int;
BEGIN
    UPDATE job SET queues = p_queues WHERE id = p_job_id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;
