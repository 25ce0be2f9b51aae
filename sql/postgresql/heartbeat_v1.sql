-- heartbeat_v1(job_id, now): a live job says so; its running TIs are stamped with it.
-- Returns false when the job is no longer `running` (another process judged it dead and
-- cleaned up after it): the caller must stop and register again.
-- Lock: the job row and the TI rows it owns (plain row locks, held briefly).
CREATE OR REPLACE FUNCTION heartbeat_v1(p_job_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
BEGIN
    UPDATE job SET latest_heartbeat = v_now WHERE id = p_job_id AND state = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE task_instance SET last_heartbeat_at = v_now
    WHERE worker_job_id = p_job_id AND state = 'running';
    RETURN true;
END;
$$;
