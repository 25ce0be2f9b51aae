-- A batch of ended triggers (fire_triggers_v1): JSON arrays of ids, events (JSON text), errors
-- and final states, one element per trigger.
CALL fire_triggers_v1(:trigger_ids, :events, :errors, :finals, :now, :boost, :max_bytes)
