-- defer_ti_v3: defer_ti_v2 that also takes the Defer of a PREEMPTED try (docs/priority.md,
-- "A preempted task that defers"): a TI in `preempting` (preempt_v1 chose it; its worker sent
-- SIGTERM, and the task's SIGTERM handler raised Defer) with the same try_number becomes
-- `deferred` as a running one would (trigger row, next_method, next_kwargs: its progress is
-- kept; the same try goes on when the trigger fires), with a state_change row ('preempted',
-- preempting -> deferred). The preemption uses no retry, as when heartbeat_v3 puts a stopped
-- victim back to `scheduled`.
-- The rule for pools with include_deferred: there a deferred TI keeps holding its slot, so a
-- victim that deferred would never free the slot it was preempted for. Its Defer is refused
-- (NULL, as a stale report): the worker no longer lists the try and heartbeat_v3 puts the TI
-- back to `scheduled` like any stopped victim (its progress is lost, its slot freed). In a
-- pool without include_deferred the deferred TI holds no slot: the slot it frees is kept by
-- the preemptor's reservation (queue_tis_v4), and the resume competes later with the boost
-- fire_trigger_v2 gives it.
-- Same arguments and result as v2; its error messages name defer_ti_v3.
-- Lock: as v2, the task_instance row (FOR UPDATE), then the pool row is read (no lock).
-- v2's description follows.
-- defer_ti_v3(ti_id, try_number, classpath, trigger_kwargs, method, next_kwargs, timeout_s, now):
-- a worker reports that a running try raised Defer. The database writes a `trigger` row
-- (classpath "module.path:Class", its kwargs, created_at = now, timeout_at = now + timeout_s or
-- NULL, no triggerer yet) and the TI becomes `deferred` with trigger_id, next_method and
-- next_kwargs. The try goes on (same try_number) when the trigger fires: fire_trigger_v2.
-- Returns 'deferred', or NULL when the report is stale (the TI is no longer running that try).
-- Slots: the worker's slot is free (its process has exited). In a pool with include_deferred
-- the TI keeps counting against every limit (view limit_usage), elsewhere against none.
--
-- New in v2: it checks its arguments before anything else and refuses a bad one with a one-line
-- user error (SIGNAL SQLSTATE '45000') that names it, instead of failing with a data error:
--   classpath  'module.path:Class' text without NUL, at most 4,000 characters;
--   method     1-250 characters (MAX_ID_LENGTH), without NUL;
--   kwargs     trigger_kwargs and next_kwargs are JSON text of an object (NULL: {});
--   timeout_s  NULL (waits for ever) or within [0, 3,153,600,000] (engine/validate.py
--              MAX_SECONDS, so now + timeout fits every timestamp); 1e300 is refused.
-- The worker turns a refused report into a failed try with the reason (finish_ti_v2).
--
-- Lock: the task_instance row, FOR UPDATE, for the compare-and-set on (state, try_number).
-- Invariant: running (or, from v3, preempting outside include_deferred pools) -> deferred only;
-- never adds to a limit's usage; every stored timeout_at
-- is within now + MAX_SECONDS.
-- Callers may assume: a repeated or late report changes nothing and creates no trigger; a bad
-- argument changes nothing either.
-- MySQL: a FUNCTION that modifies data (see heartbeat_v1 about binary logging); bad input is
-- SIGNAL SQLSTATE '45000' (MESSAGE_TEXT within 128 characters); `trigger` is a reserved word
-- (quoted); LAST_INSERT_ID() for INSERT ... RETURNING; fractional seconds as microseconds. The
-- text parameters are LONGTEXT (a JSON or VARCHAR(250) parameter would refuse bad or long input
-- with a data error before these checks run). A DOUBLE holds no NaN or Infinity: the driver
-- cannot even send them (PyMySQL writes them as unknown column names); the worker refuses them.
CREATE FUNCTION defer_ti_v3(p_ti_id BIGINT, p_try_number INT, p_classpath LONGTEXT, p_trigger_kwargs LONGTEXT,
                            p_method LONGTEXT, p_next_kwargs LONGTEXT, p_timeout_s DOUBLE, p_now DATETIME(6))
RETURNS VARCHAR(20)
NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    DECLARE v_now     DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_state   VARCHAR(20);
    DECLARE v_try     INT;
    DECLARE v_trigger BIGINT;
    DECLARE v_kwargs  LONGTEXT DEFAULT COALESCE(p_trigger_kwargs, '{}');
    DECLARE v_next    LONGTEXT DEFAULT COALESCE(p_next_kwargs, '{}');
    DECLARE v_msg     VARCHAR(128);
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_state = NULL;
    IF p_classpath IS NULL OR p_classpath NOT LIKE '%_:_%' OR CHAR_LENGTH(p_classpath) > 4000
       OR LOCATE(CHAR(0 USING utf8mb4), p_classpath) > 0 THEN
        SET v_msg = LEFT(CONCAT('defer_ti_v3: bad trigger classpath ',
                                QUOTE(REGEXP_REPLACE(LEFT(COALESCE(p_classpath, 'NULL'), 30), '[[:cntrl:]]', '?')),
                                '; use ''module.path:Class'' (at most 4000 characters)'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    IF p_method IS NULL OR CHAR_LENGTH(p_method) NOT BETWEEN 1 AND 250 OR LOCATE(CHAR(0 USING utf8mb4), p_method) > 0 THEN
        SET v_msg = LEFT(CONCAT('defer_ti_v3: bad method ',
                                QUOTE(REGEXP_REPLACE(LEFT(COALESCE(p_method, 'NULL'), 30), '[[:cntrl:]]', '?')),
                                '; use the name of a method, 1-250 characters'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    IF p_timeout_s IS NOT NULL AND NOT (p_timeout_s >= 0 AND p_timeout_s <= 3153600000) THEN
        SET v_msg = LEFT(CONCAT('defer_ti_v3: bad timeout ', p_timeout_s, ' s; use none or 0 to 3153600000 seconds'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    IF NOT JSON_VALID(v_kwargs) OR NOT JSON_VALID(v_next) THEN
        SET v_msg = CONCAT('defer_ti_v3: ', IF(JSON_VALID(v_kwargs), 'next kwargs', 'trigger kwargs'),
                           ' are not plain JSON; use a JSON object without NaN or Infinity');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    IF JSON_TYPE(v_kwargs) <> 'OBJECT' OR JSON_TYPE(v_next) <> 'OBJECT' THEN
        SET v_msg = CONCAT('defer_ti_v3: ', IF(JSON_TYPE(v_kwargs) = 'OBJECT', 'next kwargs', 'trigger kwargs'),
                           ' must be a JSON object, got a JSON ',
                           LOWER(IF(JSON_TYPE(v_kwargs) = 'OBJECT', JSON_TYPE(v_next), JSON_TYPE(v_kwargs))));
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;

    SELECT ti.state, ti.try_number INTO v_state, v_try FROM task_instance ti WHERE ti.id = p_ti_id FOR UPDATE;
    IF v_state IS NULL OR v_state NOT IN ('running', 'preempting') OR v_try <> p_try_number THEN
        RETURN NULL;
    END IF;
    IF v_state = 'preempting' AND EXISTS (SELECT 1 FROM task_instance ti JOIN pool p ON p.name = ti.pool
                                          WHERE ti.id = p_ti_id AND p.include_deferred) THEN
        RETURN NULL;   -- deferred, it would keep the slot it was preempted for: heartbeat_v3 reschedules it
    END IF;

    INSERT INTO `trigger` (classpath, kwargs, ti_id, created_at, timeout_at)
    VALUES (p_classpath, v_kwargs, p_ti_id, v_now,
            CASE WHEN p_timeout_s IS NOT NULL THEN v_now + INTERVAL ROUND(p_timeout_s * 1000000) MICROSECOND END);
    SET v_trigger = LAST_INSERT_ID();

    UPDATE task_instance ti
    SET ti.state = 'deferred', ti.trigger_id = v_trigger, ti.next_method = p_method,
        ti.next_kwargs = v_next, ti.updated_at = v_now,
        ti.state_reason = CONCAT('deferred: waiting for ', p_classpath)
    WHERE ti.id = p_ti_id;
    IF v_state = 'preempting' THEN
        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        SELECT v_now, 'preempted', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, 'preempting',
               'deferred', 'the preempted try deferred: its progress is kept'
        FROM task_instance ti WHERE ti.id = p_ti_id;
    END IF;
    RETURN 'deferred';
END
