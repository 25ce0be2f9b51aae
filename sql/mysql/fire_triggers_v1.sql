-- fire_triggers_v1(trigger_ids, events, errors, finals, now, boost, max_bytes): a batch of ended
-- triggers, reported by a triggerer in one call (arrays of the same length, element i for
-- trigger i; ids distinct). The database decides what happens to each trigger's deferred TI,
-- as fire_trigger_v2 does for one, and returns (trigger_id, state): the TI's new state, NULL
-- when the trigger had already fired or its TI no longer waits on it (the trigger is marked
-- fired either way).
--   error NULL, final NULL, pool with include_deferred -> `queued` (kept its place in every
--       limit while deferred: no count grows);
--   error NULL, final NULL, other pools -> `scheduled` with priority_weight = task's + boost;
--   error set (the trigger raised, could not load, timed out, or its event is not plain JSON)
--       -> the try fails through finish_ti_v3 (up_for_retry while retries remain, else failed);
--   final 'success' -> the try ends as `success` through finish_ti_v3 with the event as its
--       result (task_result; JSON null: no result; an event over max_bytes fails the try), no
--       worker round trip: downstream trigger rules apply on the next schedule_tis pass;
--   final 'failed' -> the try fails through finish_ti_v3 (exit code 1, retried if retries
--       remain) with the reason "the trigger ended the try as failed: <event>";
--   any other final -> an error fire ("unknown final state ...").
-- Events are JSON text: text that is not valid JSON (NaN, Infinity, a raw control character)
-- turns that trigger's fire into an error fire, and only that one's. Errors lose their NUL
-- characters and are cut to 4,000 characters.
--
-- Lock: the batch's trigger rows (the UPDATE that marks them fired), then their TIs' rows (a
-- locking cursor, in id order): always trigger before TI, as fire_trigger_v2 and
-- claim_triggers_v2.
-- A TI is reached only through its trigger's row, so two triggerers firing the same trigger
-- (a takeover) meet on the trigger row, and the second finds it fired.
-- Invariant: as fire_trigger_v2: a trigger fires once (compare-and-set on fired_at IS NULL), a
-- TI resumes or ends once per deferral (compare-and-set on state 'deferred' and trigger_id);
-- no limit's usage grows (queued only from an include_deferred pool; success/failed release).
-- Callers may assume: one call costs a fixed number of set-based statements plus one
-- finish_ti_v3 call per finishing TI (errors and final events); calling it again for the
-- same triggers is harmless; no event, error or stored value makes it raise.
-- MySQL: a PROCEDURE whose final SELECT returns (trigger_id, state) in input order; the arrays
-- are JSON arrays (engine.db.run sends lists as JSON), read with JSON_TABLE into a session
-- temporary table. The trigger rows are locked and marked by one UPDATE driven by that table
-- (STRAIGHT_JOIN: in input order, which the triggerer sorts by id); the TI rows by a locking
-- cursor in id order. What the decisions need (the pool's include_deferred, the task's
-- priority) is read after the locks by INSERT ... SELECT, a plain read under READ COMMITTED
-- (no shared lock on pool or task rows, see fire_trigger_v2); the resumes are one UPDATE
-- driven by the temporary table (a single-table UPDATE with IN (subquery) would scan
-- task_instance on MariaDB 10.11).
CREATE PROCEDURE fire_triggers_v1(IN p_trigger_ids LONGTEXT, IN p_events LONGTEXT, IN p_errors LONGTEXT,
                                  IN p_finals LONGTEXT, IN p_now DATETIME(6), IN p_boost INT, IN p_max_bytes INT)
BEGIN
    DECLARE v_now   DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_done  BOOLEAN DEFAULT FALSE;
    DECLARE v_id    BIGINT;
    DECLARE v_next  BIGINT;
    DECLARE v_trig  BIGINT;
    DECLARE v_try   INT;
    DECLARE v_event LONGTEXT;
    DECLARE v_error TEXT;
    DECLARE v_final VARCHAR(20);
    DECLARE v_state VARCHAR(20);
    DECLARE c_lock CURSOR FOR
        SELECT ti.id FROM task_instance ti
        WHERE ti.id IN (SELECT i.ti_id FROM fire_triggers_v1_in i WHERE i.fired)
        ORDER BY ti.id
        FOR UPDATE;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    CREATE TEMPORARY TABLE IF NOT EXISTS fire_triggers_v1_in (
        n INT PRIMARY KEY, id BIGINT NOT NULL, event LONGTEXT, error LONGTEXT, final VARCHAR(100),
        fired BOOLEAN NOT NULL DEFAULT FALSE, ti_id BIGINT, state VARCHAR(20), KEY (ti_id));
    CREATE TEMPORARY TABLE IF NOT EXISTS fire_triggers_v1_ti (
        ti_id BIGINT PRIMARY KEY, trigger_id BIGINT NOT NULL, try_number INT, keeps BOOLEAN, priority INT,
        event LONGTEXT, error LONGTEXT, final VARCHAR(100));
    DELETE FROM fire_triggers_v1_in;
    DELETE FROM fire_triggers_v1_ti;

    -- Each array is read once (a JSON_TABLE joined to another would be read once per row).
    INSERT INTO fire_triggers_v1_in (n, id)
    SELECT a.n, a.id FROM JSON_TABLE(p_trigger_ids, '$[*]' COLUMNS (n FOR ORDINALITY, id BIGINT PATH '$')) a
    WHERE a.id IS NOT NULL;
    INSERT INTO fire_triggers_v1_in (n, id, event)
    SELECT e.n, 0, e.event FROM JSON_TABLE(p_events, '$[*]' COLUMNS (n FOR ORDINALITY, event LONGTEXT PATH '$')) e
    ON DUPLICATE KEY UPDATE event = VALUES(event);
    INSERT INTO fire_triggers_v1_in (n, id, error)
    SELECT r.n, 0, r.error FROM JSON_TABLE(p_errors, '$[*]' COLUMNS (n FOR ORDINALITY, error LONGTEXT PATH '$')) r
    ON DUPLICATE KEY UPDATE error = VALUES(error);
    INSERT INTO fire_triggers_v1_in (n, id, final)
    SELECT f.n, 0, f.final FROM JSON_TABLE(p_finals, '$[*]' COLUMNS (n FOR ORDINALITY, final VARCHAR(100) PATH '$')) f
    ON DUPLICATE KEY UPDATE final = VALUES(final);
    DELETE FROM fire_triggers_v1_in WHERE id = 0;  -- an element beyond the ids
    UPDATE fire_triggers_v1_in i
    SET i.error = CONCAT(COALESCE(CONCAT(i.error, '; '), ''), 'the trigger''s event is not plain JSON'), i.event = NULL
    WHERE i.event IS NOT NULL AND NOT JSON_VALID(i.event);
    UPDATE fire_triggers_v1_in i
    SET i.error = CONCAT(COALESCE(CONCAT(i.error, '; '), ''), 'unknown final state ''', LEFT(i.final, 100),
                         '''; use success or failed'), i.final = NULL
    WHERE i.final IS NOT NULL AND i.final NOT IN ('success', 'failed');
    UPDATE fire_triggers_v1_in i SET i.error = LEFT(REPLACE(i.error, CHAR(0 USING utf8mb4), ''), 4000)
    WHERE i.error IS NOT NULL;

    -- The triggers not fired yet: locked and marked fired in one statement.
    UPDATE fire_triggers_v1_in i STRAIGHT_JOIN `trigger` g ON g.id = i.id
    SET g.fired_at = v_now, g.event = i.event, g.error = i.error, i.fired = TRUE, i.ti_id = g.ti_id
    WHERE g.fired_at IS NULL;

    -- Their TIs, locked in id order; then what the decisions need, read without locks.
    OPEN c_lock;
    locking: LOOP
        FETCH c_lock INTO v_id;
        IF v_done THEN
            LEAVE locking;
        END IF;
    END LOOP;
    CLOSE c_lock;
    INSERT INTO fire_triggers_v1_ti (ti_id, trigger_id, try_number, keeps, priority, event, error, final)
    SELECT ti.id, i.id, ti.try_number, COALESCE(p.include_deferred, FALSE),
           GREATEST(LEAST(COALESCE(t.priority_weight, ti.priority_weight) + COALESCE(p_boost, 0), 2147483647),
                    -2147483648),
           i.event, i.error, i.final
    FROM fire_triggers_v1_in i
    JOIN task_instance ti ON ti.id = i.ti_id
    LEFT JOIN pool p ON p.name = ti.pool
    LEFT JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
    WHERE i.fired AND ti.state = 'deferred' AND ti.trigger_id = i.id;

    -- Resumes, set-based: one UPDATE driven by the temporary table (its rows are locked above).
    UPDATE fire_triggers_v1_ti x STRAIGHT_JOIN task_instance ti ON ti.id = x.ti_id
    SET ti.state = CASE WHEN x.keeps THEN 'queued' ELSE 'scheduled' END,
        ti.queued_at = CASE WHEN x.keeps THEN v_now END,
        ti.queued_by_job_id = NULL, ti.updated_at = v_now,
        ti.priority_weight = CASE WHEN x.keeps THEN ti.priority_weight ELSE x.priority END,
        ti.state_reason = CASE WHEN x.keeps THEN 'resumed: trigger fired; kept its slot'
                               ELSE CONCAT('resumed: trigger fired; waits for a slot with priority boost ',
                                           COALESCE(p_boost, 0)) END
    WHERE x.error IS NULL AND x.final IS NULL AND ti.state = 'deferred';
    UPDATE fire_triggers_v1_in i STRAIGHT_JOIN fire_triggers_v1_ti x ON x.ti_id = i.ti_id AND x.trigger_id = i.id
    SET i.state = CASE WHEN x.keeps THEN 'queued' ELSE 'scheduled' END
    WHERE x.error IS NULL AND x.final IS NULL;

    -- Errors and final events: each try ends through finish_ti_v3 (history, retries, result).
    SET v_id = 0;
    finishing: LOOP
        SELECT MIN(x.ti_id) INTO v_next FROM fire_triggers_v1_ti x
        WHERE x.ti_id > v_id AND (x.error IS NOT NULL OR x.final IS NOT NULL);
        IF v_next IS NULL THEN
            LEAVE finishing;
        END IF;
        SET v_id = v_next;
        SELECT x.trigger_id, x.try_number, x.event, x.error, x.final INTO v_trig, v_try, v_event, v_error, v_final
        FROM fire_triggers_v1_ti x WHERE x.ti_id = v_id;
        UPDATE task_instance ti SET ti.state = 'running', ti.next_method = NULL, ti.next_kwargs = NULL
        WHERE ti.id = v_id;
        SET v_state = CASE
            WHEN v_error IS NOT NULL THEN finish_ti_v3(v_id, v_try, NULL, FALSE, v_error, v_now, NULL, NULL)
            WHEN v_final = 'success' THEN finish_ti_v3(v_id, v_try, 0, FALSE, NULL, v_now,
                                                       CASE WHEN JSON_TYPE(v_event) = 'NULL' THEN NULL ELSE v_event END,
                                                       p_max_bytes)
            ELSE finish_ti_v3(v_id, v_try, 1, FALSE,
                              LEFT(CONCAT('the trigger ended the try as failed: ', COALESCE(v_event, 'null')), 4000),
                              v_now, NULL, NULL) END;
        UPDATE fire_triggers_v1_in i SET i.state = v_state WHERE i.ti_id = v_id AND i.id = v_trig;
    END LOOP;

    SELECT i.id AS trigger_id, i.state FROM fire_triggers_v1_in i ORDER BY i.n;
END
