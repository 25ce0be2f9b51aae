-- A batch of ended triggers (fire_triggers_v1; v2 decides the tries they end set-based): arrays
-- of ids, events (JSON text), errors and final states, one element per trigger. The NOTIFYs wake
-- a scheduler (resumed TIs to queue, finished tries' downstream) and the workers (TIs queued at
-- once): delivered at commit.
SELECT pg_notify('engine_scheduler', '');
SELECT pg_notify('engine_queued', '');
SELECT * FROM fire_triggers_v2(CAST(:trigger_ids AS bigint[]), CAST(:events AS text[]), CAST(:errors AS text[]),
                               CAST(:finals AS text[]), :now, :boost, :max_bytes)
