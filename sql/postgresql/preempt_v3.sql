-- preempt_v3(now, cooldown, max_per_pass, min_runtime): on PostgreSQL exactly preempt_v2, which it
-- calls (read sql/postgresql/preempt_v1.sql for the contract). The version exists for
-- MySQL/MariaDB, whose preempt_v3 reads each victim's worker without a shared lock (its v2 took one
-- with a SET subquery, which closed a lock cycle with a worker's heartbeat); both dialects name
-- the same procedures, and the named query `preempt` calls v3 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of preempt_v2 (preempt_v1's).
CREATE OR REPLACE FUNCTION preempt_v3(p_now timestamptz DEFAULT NULL, p_cooldown double precision DEFAULT 300,
                                      p_max_per_pass int DEFAULT 10, p_min_runtime double precision DEFAULT 60)
RETURNS TABLE (ti_id bigint, for_ti_id bigint, reason text)
LANGUAGE sql
AS $$
    SELECT * FROM preempt_v2(p_now, p_cooldown, p_max_per_pass, p_min_runtime);
$$;
