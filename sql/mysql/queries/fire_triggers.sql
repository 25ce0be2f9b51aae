-- A batch of ended triggers (fire_triggers_v1; v2 decides the tries they end set-based): JSON
-- arrays of ids, events (JSON text), errors and final states, one element per trigger.
CALL fire_triggers_v2(:trigger_ids, :events, :errors, :finals, :now, :boost, :max_bytes)
