-- A trigger ended with an event (JSON text) or an error (fire_trigger_v1).
SELECT fire_trigger_v1(:trigger_id, CAST(:event AS jsonb), :error, :now, :boost) AS state
