-- send_event_v2(key, payload, now, boost): send_event_v1 (read sql/mysql/send_event_v1.sql: the
-- same arguments, result and meaning) firing through fire_trigger_v3 instead of fire_trigger_v1:
-- each resume reads its pool's include_deferred by a locking read (the last committed flag).
-- fire_trigger_v1 read it by a plain read, from the read view this FUNCTION's statement made while
-- firing an earlier trigger: a TI whose row a change of that flag held was queued, once the
-- change committed, "keeping" the slot the change had freed (past the pool's limit).
--
-- Lock: the matching trigger rows, FOR UPDATE in id order (a triggerer claiming one holds it for
-- a moment: wait rather than miss it), then each TI row and its pool row (fire_trigger_v3).
-- Invariant: each trigger fires once; no limit's usage grows (fire_trigger_v3).
-- Callers may assume: returns how many TIs resumed; a key nobody waits on returns 0.
-- MySQL: a FUNCTION that modifies data (as v1); the JSON payload is handed on as text.
CREATE FUNCTION send_event_v2(p_key VARCHAR(250), p_payload JSON, p_now DATETIME(6), p_boost INT)
RETURNS INT
NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    DECLARE v_now  DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_n    INT DEFAULT 0;
    DECLARE v_done BOOLEAN DEFAULT FALSE;
    DECLARE v_id   BIGINT;
    DECLARE c_waiting CURSOR FOR
        SELECT g.id FROM `trigger` g
        WHERE g.fired_at IS NULL AND g.classpath = 'engine.triggers:EventTrigger'
          AND JSON_UNQUOTE(JSON_EXTRACT(g.kwargs, '$.key')) = p_key
        ORDER BY g.id
        FOR UPDATE;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;
    OPEN c_waiting;
    firing: LOOP
        FETCH c_waiting INTO v_id;
        IF v_done THEN
            LEAVE firing;
        END IF;
        IF fire_trigger_v3(v_id, p_payload, NULL, v_now, p_boost) IS NOT NULL THEN
            SET v_n = v_n + 1;
        END IF;
    END LOOP;
    CLOSE c_waiting;
    RETURN v_n;
END
