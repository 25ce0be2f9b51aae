-- A DBA's hand edit of heartbeat_v1: same signature and characteristics, another body
-- (MySQL has no CREATE OR REPLACE FUNCTION: drop, then create).
DROP FUNCTION heartbeat_v1;
CREATE FUNCTION heartbeat_v1(p_job_id BIGINT, p_now DATETIME(6))
RETURNS BOOLEAN
NOT DETERMINISTIC MODIFIES SQL DATA
RETURN TRUE
