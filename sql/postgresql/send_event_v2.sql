-- send_event_v2(key, payload, now, boost): send_event_v1 (read sql/postgresql/send_event_v1.sql:
-- the same arguments, result and meaning) firing through fire_trigger_v3 instead of
-- fire_trigger_v1: each resume reads its pool's include_deferred in the statement that moves the
-- TI, after any change of that flag in flight committed (fire_trigger_v1 read it before its
-- wait, and could queue a TI "keeping" a slot the change had freed: past the pool's limit).
-- The payload arrives as jsonb (checked by the CLI) and is handed on as its text.
--
-- Lock: the matching trigger rows, FOR UPDATE in id order (a triggerer claiming one holds it for
-- a moment: wait rather than miss it), then each TI row (fire_trigger_v3).
-- Invariant: each trigger fires once; no limit's usage grows (fire_trigger_v3).
-- Callers may assume: returns how many TIs resumed; a key nobody waits on returns 0.
CREATE OR REPLACE FUNCTION send_event_v2(p_key text, p_payload jsonb, p_now timestamptz DEFAULT NULL,
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
        IF fire_trigger_v3(r.id, p_payload::text, NULL, v_now, p_boost) IS NOT NULL THEN
            v_n := v_n + 1;
        END IF;
    END LOOP;
    RETURN v_n;
END;
$$;
