-- The priority knobs (docs/priority.md) travel as user variables that queue_tis_v27 reads and
-- clears (its arguments stay those of v1..v3, so a service can be pinned back to them):
-- aging_rate, priority points per minute scheduled (0: off), aging_cap, their most;
-- reserve_after, seconds a wide TI waits before its pool keeps slots for it (0: off).
-- With every knob off the scheduler sends only the CALL (db.run(last_only=True)): a knob left
-- NULL is off (every call clears them), so one round trip per pass is enough.
SET @engine_aging_rate = :aging_rate, @engine_aging_cap = :aging_cap, @engine_reserve_after = :reserve_after;
-- MySQL procedures have no parameter defaults: 2 is queue_tis_v27's p_page_factor default.
CALL queue_tis_v27(:max_tis, :job_id, :now, 2)
