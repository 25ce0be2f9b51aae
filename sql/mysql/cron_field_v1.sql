-- cron_field_v1(field, lo, hi): the sorted values one field of a 5-field cron allows.
-- Pure: no table, no lock. `engine dags sync` has already validated the field with croniter
-- and translated month/day names to numbers, so only digits, * , - / reach here.
-- MySQL: no arrays; the values come back as a JSON array text ('[0,15,30,45]'), NULL when an
-- argument is NULL (PostgreSQL: STRICT).
CREATE FUNCTION cron_field_v1(p_field VARCHAR(200), p_lo INT, p_hi INT)
RETURNS VARCHAR(1000)
DETERMINISTIC NO SQL
BEGIN
    DECLARE v_rest  VARCHAR(200);
    DECLARE v_part  VARCHAR(200);
    DECLARE v_range VARCHAR(200);
    DECLARE v_step  INT;
    DECLARE v_from  INT;
    DECLARE v_to    INT;
    DECLARE v       INT;
    DECLARE v_mask  VARCHAR(100);   -- character i + 1 is '1' when value i is allowed
    DECLARE v_out   VARCHAR(1000) DEFAULT '';
    IF p_field IS NULL OR p_lo IS NULL OR p_hi IS NULL THEN
        RETURN NULL;
    END IF;
    SET v_rest = p_field;
    SET v_mask = REPEAT('0', p_hi + 1);
    WHILE v_rest <> '' DO
        SET v_part = SUBSTRING_INDEX(v_rest, ',', 1);
        SET v_rest = IF(LOCATE(',', v_rest) > 0, SUBSTRING(v_rest, LOCATE(',', v_rest) + 1), '');
        SET v_step = IF(LOCATE('/', v_part) > 0 AND SUBSTRING_INDEX(v_part, '/', -1) <> '',
                        CAST(SUBSTRING_INDEX(v_part, '/', -1) AS SIGNED), 1);
        SET v_range = SUBSTRING_INDEX(v_part, '/', 1);
        IF v_range = '*' THEN
            SET v_from = p_lo;
            SET v_to = p_hi;
        ELSEIF LOCATE('-', v_range) > 0 THEN
            SET v_from = CAST(SUBSTRING_INDEX(v_range, '-', 1) AS SIGNED);
            SET v_to = CAST(SUBSTRING_INDEX(v_range, '-', -1) AS SIGNED);
        ELSE
            SET v_from = CAST(v_range AS SIGNED);
            -- "5/15" means from 5 to the end every 15; a bare "5" is just 5.
            SET v_to = IF(LOCATE('/', v_part) > 0, p_hi, v_from);
        END IF;
        SET v = v_from;
        WHILE v <= v_to DO
            SET v_mask = INSERT(v_mask, v + 1, 1, '1');
            SET v = v + v_step;
        END WHILE;
    END WHILE;
    SET v = 0;
    WHILE v <= p_hi DO
        IF SUBSTRING(v_mask, v + 1, 1) = '1' THEN
            SET v_out = CONCAT(v_out, IF(v_out = '', '', ','), v);
        END IF;
        SET v = v + 1;
    END WHILE;
    RETURN CONCAT('[', v_out, ']');
END
