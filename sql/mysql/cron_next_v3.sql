-- cron_next_v3(expr, zone, after): the first instant strictly after `after` (to the minute)
-- at which a 5-field cron expression fires when read in time zone `zone` (an IANA name; the
-- DAG's timezone), or NULL when none within ~5 years or not before 9999-01-01 (as cron_next_v2).
-- New in v3: the zone. The wall-clock times of `zone` come from the table tz_offset (one row
-- per period of the zone: its UTC offset from utc_from until the next row's), which `engine
-- dags sync` fills from Python's zoneinfo; 'UTC' needs no rows and is cron_next_v2 itself.
-- Across a DST change it fires as croniter does with zoned datetimes (what Airflow uses):
--   * spring forward: a fire time in the skipped local hour fires once, at the transition
--     instant (the first instant after the gap: "30 2 * * *" fires at 03:00 local that day),
--     unless the hour field covers every hour: then it does not fire ("30 * * * *" fires at
--     01:30, then 03:30; croniter's rule);
--   * fall back: a fire time in the repeated local hour fires twice, once for each offset
--     ("30 2 * * *" fires at 02:30 summer time, then at 02:30 winter time, an hour later).
-- How: in each period the zone's wall clock is UTC shifted by the period's offset, so
-- cron_next_v2 on the shifted time answers within the period; past the period's end it goes
-- on in the next one (the gap rule first). Each step crosses one transition.
-- Reads tz_offset (primary key lookups); no lock. Raises when `zone` is not UTC and has no rows
-- (create_dag_runs records it against the DAG: sync the DAG again).
-- MySQL: DATETIME(6) in UTC; MariaDB's own time zone tables are not used (a fresh server has
-- none). Lookups are scalar subqueries (NULL when no row) rather than SELECT ... INTO.
CREATE FUNCTION cron_next_v3(p_expr VARCHAR(200), p_zone VARCHAR(64), p_after DATETIME(6))
RETURNS DATETIME(6)
NOT DETERMINISTIC READS SQL DATA
BEGIN
    DECLARE v_off   INT;          -- seconds east of UTC in the current period
    DECLARE v_off2  INT;          -- ... in the next one
    DECLARE v_end   DATETIME(6);  -- when the current period ends (NULL: never)
    DECLARE v_local DATETIME(6);  -- the zone's wall clock: search after it
    DECLARE v_fire  DATETIME(6);  -- a fire time on that wall clock
    DECLARE v_hourly BOOLEAN;     -- the hour field covers every hour: a fire time in a gap is skipped
    DECLARE v_msg   VARCHAR(128);
    DECLARE i       INT DEFAULT 0;
    IF p_expr IS NULL OR p_zone IS NULL OR p_after IS NULL THEN
        RETURN NULL;  -- PostgreSQL: STRICT
    END IF;
    IF p_zone = 'UTC' THEN
        RETURN cron_next_v2(p_expr, p_after);
    END IF;
    SET v_off = (SELECT z.utc_offset FROM tz_offset z
                 WHERE z.zone = p_zone AND z.utc_from <= p_after ORDER BY z.utc_from DESC LIMIT 1);
    IF v_off IS NULL THEN
        SET v_msg = LEFT(CONCAT('time zone ', QUOTE(LEFT(p_zone, 40)),
                                ' has no rows in tz_offset; run `engine dags sync` for the DAGs that use it'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SET v_end = (SELECT MIN(z.utc_from) FROM tz_offset z WHERE z.zone = p_zone AND z.utc_from > p_after);
    SET v_local = p_after + INTERVAL v_off SECOND;
    SET v_hourly = (SELECT COUNT(DISTINCT j.h) = 24
                    FROM JSON_TABLE(cron_field_v1(SUBSTRING_INDEX(SUBSTRING_INDEX(
                             REGEXP_REPLACE(TRIM(p_expr), '[[:space:]]+', ' '), ' ', 2), ' ', -1), 0, 23),
                         '$[*]' COLUMNS (h INT PATH '$')) j);
    WHILE i < 1000 DO
        SET i = i + 1;
        SET v_fire = cron_next_v2(p_expr, v_local);
        IF v_fire IS NULL THEN
            RETURN NULL;
        END IF;
        IF v_end IS NULL OR v_fire < v_end + INTERVAL v_off SECOND THEN
            SET v_fire = v_fire - INTERVAL v_off SECOND;
            RETURN IF(v_fire < '9999-01-01', v_fire, NULL);
        END IF;
        SET v_off2 = (SELECT z.utc_offset FROM tz_offset z WHERE z.zone = p_zone AND z.utc_from = v_end);
        IF v_off2 > v_off AND v_fire < v_end + INTERVAL v_off2 SECOND AND NOT v_hourly THEN
            RETURN v_end;  -- it fell in the skipped local hour: fire at the transition
        END IF;
        SET v_local = v_end + INTERVAL v_off2 SECOND - INTERVAL 1 SECOND;
        SET v_off = v_off2;
        SET v_end = (SELECT MIN(z.utc_from) FROM tz_offset z WHERE z.zone = p_zone AND z.utc_from > v_end);
    END WHILE;
    RETURN NULL;
END
