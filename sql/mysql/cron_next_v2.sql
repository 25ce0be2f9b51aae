-- cron_next_v2(expr, after): the first time strictly after `after` (to the minute, UTC) that a
-- 5-field cron expression fires, or NULL when none within ~5 years (e.g. "0 0 30 2 *").
-- New in v2: also NULL when the next fire time is not before 9999-01-01 (the horizon): every
-- fire time it returns is readable by Python and storable in MySQL's DATETIME, and it never
-- steps past year 9999 (v1 raised "datetime field overflow" there: one step after a time
-- before the horizon reaches at most 9999-01-31). The same horizon on both dialects.
-- Pure: no table, no lock. Day matching follows croniter (what Airflow uses): when neither
-- day-of-month nor day-of-week is exactly '*', a day matches if either does ('*/1' counts as
-- restricted there, unlike Vixie cron).
-- MySQL: DATETIME(6) in UTC instead of timestamptz; the allowed values of each field are kept
-- as comma lists (from cron_field_v1's JSON arrays) and tested with FIND_IN_SET.
CREATE FUNCTION cron_next_v2(p_expr VARCHAR(200), p_after DATETIME(6))
RETURNS DATETIME(6)
DETERMINISTIC NO SQL
BEGIN
    DECLARE v_expr VARCHAR(200);
    DECLARE v_min  VARCHAR(1000);
    DECLARE v_hour VARCHAR(1000);
    DECLARE v_dom  VARCHAR(1000);
    DECLARE v_mon  VARCHAR(1000);
    DECLARE v_dow  VARCHAR(1000);
    DECLARE v_or   BOOLEAN;
    DECLARE t      DATETIME;
    DECLARE i      INT DEFAULT 0;
    DECLARE v_dom_ok BOOLEAN;
    DECLARE v_dow_ok BOOLEAN;
    IF p_expr IS NULL OR p_after IS NULL OR p_after >= '9999-01-01' THEN
        RETURN NULL;  -- PostgreSQL: STRICT; past the horizon: never
    END IF;
    SET v_expr = REGEXP_REPLACE(TRIM(p_expr), '[[:space:]]+', ' ');
    SET v_min  = REPLACE(REPLACE(cron_field_v1(SUBSTRING_INDEX(v_expr, ' ', 1), 0, 59), '[', ''), ']', '');
    SET v_hour = REPLACE(REPLACE(cron_field_v1(SUBSTRING_INDEX(SUBSTRING_INDEX(v_expr, ' ', 2), ' ', -1), 0, 23), '[', ''), ']', '');
    SET v_dom  = REPLACE(REPLACE(cron_field_v1(SUBSTRING_INDEX(SUBSTRING_INDEX(v_expr, ' ', 3), ' ', -1), 1, 31), '[', ''), ']', '');
    SET v_mon  = REPLACE(REPLACE(cron_field_v1(SUBSTRING_INDEX(SUBSTRING_INDEX(v_expr, ' ', 4), ' ', -1), 1, 12), '[', ''), ']', '');
    SET v_dow  = REPLACE(REPLACE(cron_field_v1(SUBSTRING_INDEX(SUBSTRING_INDEX(v_expr, ' ', 5), ' ', -1), 0, 7), '[', ''), ']', '');
    IF FIND_IN_SET('7', v_dow) > 0 THEN
        SET v_dow = CONCAT(v_dow, ',0');  -- 7 is Sunday too
    END IF;
    SET v_or = SUBSTRING_INDEX(SUBSTRING_INDEX(v_expr, ' ', 3), ' ', -1) <> '*'
               AND SUBSTRING_INDEX(SUBSTRING_INDEX(v_expr, ' ', 5), ' ', -1) <> '*';
    SET t = CAST(DATE_FORMAT(p_after, '%Y-%m-%d %H:%i:00') AS DATETIME) + INTERVAL 1 MINUTE;
    WHILE i < 5000 AND t < '9999-01-01' DO  -- each step skips at least a whole minute/hour/day/month
        SET i = i + 1;
        IF FIND_IN_SET(MONTH(t), v_mon) = 0 THEN
            SET t = CAST(DATE_FORMAT(t, '%Y-%m-01') AS DATETIME) + INTERVAL 1 MONTH;
        ELSE
            SET v_dom_ok = FIND_IN_SET(DAYOFMONTH(t), v_dom) > 0;
            SET v_dow_ok = FIND_IN_SET(DAYOFWEEK(t) - 1, v_dow) > 0;  -- DAYOFWEEK: 1 = Sunday
            IF NOT (CASE WHEN v_or THEN v_dom_ok OR v_dow_ok ELSE v_dom_ok AND v_dow_ok END) THEN
                SET t = CAST(DATE(t) AS DATETIME) + INTERVAL 1 DAY;
            ELSEIF FIND_IN_SET(HOUR(t), v_hour) = 0 THEN
                SET t = CAST(DATE_FORMAT(t, '%Y-%m-%d %H:00:00') AS DATETIME) + INTERVAL 1 HOUR;
            ELSEIF FIND_IN_SET(MINUTE(t), v_min) = 0 THEN
                SET t = t + INTERVAL 1 MINUTE;
            ELSE
                RETURN t;
            END IF;
        END IF;
    END WHILE;
    RETURN NULL;
END
