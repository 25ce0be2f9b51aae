-- send_event_v1(key, payload, now, boost): `engine events send KEY [--payload JSON]`. Fires,
-- through fire_trigger_v1, every waiting EventTrigger (classpath engine.triggers:EventTrigger)
-- whose kwargs key is `key`, with the payload as the event. Events are not stored: a send
-- reaches the triggers waiting at that moment. Returns how many TIs resumed.
--
-- Lock: the matching trigger rows, FOR UPDATE (a triggerer claiming one holds it for a moment:
-- wait rather than miss it), then each TI row (fire_trigger_v1).
-- Invariant: each trigger fires once; the triggerer holding one drops it on its next pass.
CREATE OR REPLACE FUNCTION send_event_v1(p_key text, p_payload jsonb, p_now timestamptz DEFAULT NULL,
                                         p_boost int DEFAULT 1000)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_n   int := 0;
    r     record;
BEGIN
    FOR r IN
        SELECT g.id FROM trigger g
        WHERE g.fired_at IS NULL AND g.classpath = 'engine.triggers:EventTrigger' AND g.kwargs ->> 'key' = p_key
        ORDER BY g.id
        FOR UPDATE
    LOOP
        IF fire_trigger_v1(r.id, p_payload, NULL, v_now, p_boost) IS NOT NULL THEN
            v_n := v_n + 1;
        END IF;
    END LOOP;
    RETURN v_n;
END;
$$;
