-- defer_ti_v1(ti_id, try_number, classpath, trigger_kwargs, method, next_kwargs, timeout_s, now):
-- a worker reports that a running try raised Defer. The database writes a `trigger` row
-- (classpath "module.path:Class", its kwargs, created_at = now, timeout_at = now + timeout_s or
-- NULL, no triggerer yet) and the TI becomes `deferred` with trigger_id, next_method and
-- next_kwargs. The try goes on (same try_number) when the trigger fires: fire_trigger_v1.
-- Returns 'deferred', or NULL when the report is stale (the TI is no longer running that try).
-- Slots: the worker's slot is free (its process has exited). In a pool with include_deferred
-- the TI keeps counting against every limit (view limit_usage), elsewhere against none.
--
-- Lock: the task_instance row, FOR UPDATE, for the compare-and-set on (state, try_number).
-- Invariant: running -> deferred only; never adds to a limit's usage.
-- Callers may assume: a repeated or late report changes nothing and creates no trigger.
-- MySQL: a FUNCTION that modifies data (see heartbeat_v1 about binary logging); bad input is
-- SIGNAL SQLSTATE '45000'; `trigger` is a reserved word (quoted); LAST_INSERT_ID() for
-- INSERT ... RETURNING; fractional seconds as microseconds.
CREATE FUNCTION defer_ti_v1(p_ti_id BIGINT, p_try_number INT, p_classpath TEXT, p_trigger_kwargs JSON,
                            p_method VARCHAR(250), p_next_kwargs JSON, p_timeout_s DOUBLE, p_now DATETIME(6))
RETURNS VARCHAR(20)
NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    DECLARE v_now     DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_state   VARCHAR(20);
    DECLARE v_try     INT;
    DECLARE v_trigger BIGINT;
    DECLARE v_msg     VARCHAR(128);
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_state = NULL;
    IF p_classpath IS NULL OR p_classpath NOT LIKE '%_:_%' OR p_method IS NULL OR p_method = '' THEN
        SET v_msg = LEFT(CONCAT('defer_ti_v1: a trigger classpath ''module:Class'' and a method are required (got ',
                                COALESCE(p_classpath, 'NULL'), ' and ', COALESCE(p_method, 'NULL'), ')'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SELECT ti.state, ti.try_number INTO v_state, v_try FROM task_instance ti WHERE ti.id = p_ti_id FOR UPDATE;
    IF v_state IS NULL OR v_state <> 'running' OR v_try <> p_try_number THEN
        RETURN NULL;
    END IF;

    INSERT INTO `trigger` (classpath, kwargs, ti_id, created_at, timeout_at)
    VALUES (p_classpath, COALESCE(p_trigger_kwargs, '{}'), p_ti_id, v_now,
            CASE WHEN p_timeout_s IS NOT NULL THEN v_now + INTERVAL ROUND(p_timeout_s * 1000000) MICROSECOND END);
    SET v_trigger = LAST_INSERT_ID();

    UPDATE task_instance ti
    SET ti.state = 'deferred', ti.trigger_id = v_trigger, ti.next_method = p_method,
        ti.next_kwargs = COALESCE(p_next_kwargs, '{}'), ti.updated_at = v_now,
        ti.state_reason = CONCAT('deferred: waiting for ', p_classpath)
    WHERE ti.id = p_ti_id;
    RETURN 'deferred';
END
