-- cron_prev_v3(expr, zone, at): the last instant at or before `at` (to the minute) at which a
-- 5-field cron expression fires when read in time zone `zone`, or NULL when none within ~5
-- years. The mirror of cron_next_v3 (same table tz_offset, same DST rules: a fire time in a
-- skipped local hour fires at the transition instant, or not at all when the hour field covers
-- every hour; one in a repeated hour fires twice);
-- 'UTC' is cron_prev_v1 itself. (There is no cron_prev_v2: v3 matches cron_next_v3.)
-- Reads tz_offset (primary key lookups); no lock. Raises when `zone` is not UTC and has no rows.
-- MySQL: as cron_next_v3 (DATETIME(6) in UTC, scalar subqueries).
CREATE FUNCTION cron_prev_v3(p_expr VARCHAR(200), p_zone VARCHAR(64), p_at DATETIME(6))
RETURNS DATETIME(6)
NOT DETERMINISTIC READS SQL DATA
BEGIN
    DECLARE v_off    INT;          -- seconds east of UTC in the current period
    DECLARE v_start  DATETIME(6);  -- when the current period began
    DECLARE v_off0   INT;          -- ... the previous period's offset
    DECLARE v_start0 DATETIME(6);  -- ... and start
    DECLARE v_local  DATETIME(6);  -- the zone's wall clock: search at or before it
    DECLARE v_fire   DATETIME(6);
    DECLARE v_hourly BOOLEAN;      -- the hour field covers every hour: a fire time in a gap is skipped
    DECLARE v_msg    VARCHAR(128);
    DECLARE i        INT DEFAULT 0;
    IF p_expr IS NULL OR p_zone IS NULL OR p_at IS NULL THEN
        RETURN NULL;  -- PostgreSQL: STRICT
    END IF;
    IF p_zone = 'UTC' THEN
        RETURN cron_prev_v1(p_expr, p_at);
    END IF;
    SET v_start = (SELECT MAX(z.utc_from) FROM tz_offset z WHERE z.zone = p_zone AND z.utc_from <= p_at);
    IF v_start IS NULL THEN
        SET v_msg = LEFT(CONCAT('time zone ', QUOTE(LEFT(p_zone, 40)),
                                ' has no rows in tz_offset; run `engine dags sync` for the DAGs that use it'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SET v_off = (SELECT z.utc_offset FROM tz_offset z WHERE z.zone = p_zone AND z.utc_from = v_start);
    SET v_local = p_at + INTERVAL v_off SECOND;
    SET v_hourly = (SELECT COUNT(DISTINCT j.h) = 24
                    FROM JSON_TABLE(cron_field_v1(SUBSTRING_INDEX(SUBSTRING_INDEX(
                             REGEXP_REPLACE(TRIM(p_expr), '[[:space:]]+', ' '), ' ', 2), ' ', -1), 0, 23),
                         '$[*]' COLUMNS (h INT PATH '$')) j);
    WHILE i < 1000 DO
        SET i = i + 1;
        SET v_fire = cron_prev_v1(p_expr, v_local);
        IF v_fire IS NULL THEN
            RETURN NULL;
        END IF;
        IF v_fire >= v_start + INTERVAL v_off SECOND THEN
            RETURN v_fire - INTERVAL v_off SECOND;
        END IF;
        SET v_start0 = (SELECT MAX(z.utc_from) FROM tz_offset z WHERE z.zone = p_zone AND z.utc_from < v_start);
        IF v_start0 IS NULL THEN  -- the first period reaches back for ever
            RETURN v_fire - INTERVAL v_off SECOND;
        END IF;
        SET v_off0 = (SELECT z.utc_offset FROM tz_offset z WHERE z.zone = p_zone AND z.utc_from = v_start0);
        IF v_off > v_off0 AND v_fire >= v_start + INTERVAL v_off0 SECOND AND NOT v_hourly THEN
            RETURN v_start;  -- it fell in the local hour skipped at v_start: fire at the transition
        END IF;
        SET v_local = v_start + INTERVAL v_off0 SECOND - INTERVAL 1 SECOND;
        SET v_off = v_off0;
        SET v_start = v_start0;
    END WHILE;
    RETURN NULL;
END
