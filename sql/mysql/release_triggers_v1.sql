-- release_triggers_v1(job_id): a triggerer that stops cleanly hands its waiting triggers back,
-- so another claims them at once. Returns how many.
-- Lock: the trigger rows it releases (compare-and-set on its own ownership).
-- MySQL: a FUNCTION that modifies data (see heartbeat_v1 about binary logging).
CREATE FUNCTION release_triggers_v1(p_job_id BIGINT)
RETURNS INT
NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    UPDATE `trigger` SET triggerer_job_id = NULL WHERE triggerer_job_id = p_job_id AND fired_at IS NULL;
    RETURN ROW_COUNT();
END
