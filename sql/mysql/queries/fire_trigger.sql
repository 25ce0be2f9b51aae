-- A trigger ended with an event (JSON text) or an error (fire_trigger_v1).
SELECT fire_trigger_v1(:trigger_id, :event, :error, :now, :boost) AS state
