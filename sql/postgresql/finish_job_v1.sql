-- finish_job_v1(job_id, now): a clean shutdown; the job is finished, not dead. Returns 1 when
-- the job was running, 0 otherwise (another process had judged it dead).
-- Lock: the job row (compare-and-set on state = 'running').
CREATE OR REPLACE FUNCTION finish_job_v1(p_job_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_n int;
BEGIN
    UPDATE job SET state = 'success', end_date = coalesce(p_now, now())
    WHERE id = p_job_id AND state = 'running';
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;
