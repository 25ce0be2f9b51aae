-- preempt_v2(now, cooldown, max_per_pass, min_runtime): on PostgreSQL exactly preempt_v1, which it
-- calls (read sql/postgresql/preempt_v1.sql for the contract). The version exists for MySQL /
-- MariaDB, whose preempt_v2 takes the victims' row locks in id order (the order a worker's
-- heartbeat takes its TIs'; preempt_v1 there took them in victim order and could deadlock with
-- a heartbeat); PostgreSQL's preempt_v1 already locks them in id order. Both dialects name the
-- same procedures, and the named query `preempt` calls v2 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of preempt_v1 (scheduler_lock('queue_tis'),
-- FOR UPDATE NOWAIT, then the victims' rows in id order).
CREATE OR REPLACE FUNCTION preempt_v2(p_now timestamptz DEFAULT NULL, p_cooldown double precision DEFAULT 300,
                                      p_max_per_pass int DEFAULT 10, p_min_runtime double precision DEFAULT 60)
RETURNS TABLE (ti_id bigint, for_ti_id bigint, reason text)
LANGUAGE sql
AS $$
    SELECT * FROM preempt_v1(p_now, p_cooldown, p_max_per_pass, p_min_runtime);
$$;
