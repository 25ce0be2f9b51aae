-- A trigger ended with an event (JSON text, parsed by the function: bad JSON fails the try with
-- the reason) or an error (fire_trigger_v3). The NOTIFYs wake a scheduler (a resumed TI to
-- queue, a failed try's downstream) and the workers (a TI queued at once) now (engine/wakeup.py):
-- they are delivered at commit.
SELECT pg_notify('engine_scheduler', '');
SELECT pg_notify('engine_queued', '');
SELECT fire_trigger_v3(:trigger_id, :event, :error, :now, :boost) AS state
