-- The priority knobs (docs/priority.md) travel as transaction-local settings that queue_tis_v27
-- reads and clears (its arguments stay those of v1..v3, so a service can be pinned back to
-- them): aging_rate, priority points per minute scheduled (0: off), aging_cap, their most;
-- reserve_after, seconds a wide TI waits before its pool keeps slots for it (0: off).
-- With every knob off the scheduler sends only the last statement (db.run(last_only=True)):
-- the procedure reads an unset knob as off, so one round trip per pass is enough.
SELECT set_config('engine.aging_rate', CAST(CAST(:aging_rate AS double precision) AS text), true),
       set_config('engine.aging_cap', CAST(CAST(:aging_cap AS int) AS text), true),
       set_config('engine.reserve_after', CAST(CAST(:reserve_after AS double precision) AS text), true);
SELECT * FROM queue_tis_v27(:max_tis, :job_id, :now)
