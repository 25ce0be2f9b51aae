-- A trigger ended with an event (JSON text, parsed by the function: bad JSON fails the try with
-- the reason) or an error (fire_trigger_v3).
SELECT fire_trigger_v3(:trigger_id, :event, :error, :now, :boost) AS state
