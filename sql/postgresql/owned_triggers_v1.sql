-- owned_triggers_v1(job_id): the waiting triggers a triggerer owns, i.e. what it should be
-- running. Reads only.
CREATE OR REPLACE FUNCTION owned_triggers_v1(p_job_id bigint)
RETURNS TABLE (id bigint)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY SELECT g.id FROM trigger g WHERE g.triggerer_job_id = p_job_id AND g.fired_at IS NULL;
END;
$$;
