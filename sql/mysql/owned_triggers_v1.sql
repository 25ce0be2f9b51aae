-- owned_triggers_v1(job_id): the waiting triggers a triggerer owns, i.e. what it should be
-- running, as a result set (MySQL functions return no sets: a PROCEDURE). Reads only.
CREATE PROCEDURE owned_triggers_v1(IN p_job_id BIGINT)
READS SQL DATA
BEGIN
    SELECT g.id FROM `trigger` g WHERE g.triggerer_job_id = p_job_id AND g.fired_at IS NULL;
END
