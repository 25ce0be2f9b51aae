-- release_triggers_v1(job_id): a triggerer that stops cleanly hands its waiting triggers back,
-- so another claims them at once. Returns how many.
-- Lock: the trigger rows it releases (compare-and-set on its own ownership).
CREATE OR REPLACE FUNCTION release_triggers_v1(p_job_id bigint)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_n int;
BEGIN
    UPDATE trigger SET triggerer_job_id = NULL WHERE triggerer_job_id = p_job_id AND fired_at IS NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;
