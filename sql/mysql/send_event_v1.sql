-- send_event_v1(key, payload, now, boost): `engine events send KEY [--payload JSON]`. Fires,
-- through fire_trigger_v1, every waiting EventTrigger (classpath engine.triggers:EventTrigger)
-- whose kwargs key is `key`, with the payload as the event. Events are not stored: a send
-- reaches the triggers waiting at that moment. Returns how many TIs resumed.
--
-- Lock: the matching trigger rows, FOR UPDATE (a triggerer claiming one holds it for a moment:
-- wait rather than miss it), then each TI row (fire_trigger_v1).
-- Invariant: each trigger fires once; the triggerer holding one drops it on its next pass.
-- MySQL: a FUNCTION that modifies data; no parameter defaults; `trigger` quoted; the key is
-- read with JSON_UNQUOTE(JSON_EXTRACT(...)) (->> is MySQL-only).
CREATE FUNCTION send_event_v1(p_key VARCHAR(250), p_payload JSON, p_now DATETIME(6), p_boost INT)
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
        IF fire_trigger_v1(v_id, p_payload, NULL, v_now, p_boost) IS NOT NULL THEN
            SET v_n = v_n + 1;
        END IF;
    END LOOP;
    CLOSE c_waiting;
    RETURN v_n;
END
