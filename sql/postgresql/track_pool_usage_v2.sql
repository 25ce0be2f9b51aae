-- track_pool_usage_v2(): the trigger function of usage_pool (AFTER INSERT, UPDATE or DELETE ON pool
-- FOR EACH ROW; revision 0044). track_pool_usage_v1 (read sql/postgresql/track_pool_usage_v1.sql
-- for what it counts) with one change, a fix: A FLAG CHANGE WAITS FOR EVERY TI WRITER IN FLIGHT.
--   v1 locked the pool's deferred TIs (FOR SHARE), which holds back a TI leaving `deferred`, but
--   not one entering it: a TI moved to `deferred` (or inserted so) while a pool's include_deferred
--   change was not yet committed read the old flag in its own trigger (track_usage_v1), and v1's
--   read of the pool's deferred TIs had not seen it: the TI was counted by neither, and the
--   counters drifted from the recount (tests/test_usage_counters.py, "a TI entering deferred
--   while its pool's flag changes"); an undercount lets queue_tis exceed that pool's limits.
--   Here the first change that counts takes LOCK TABLE task_instance IN SHARE MODE: it waits until
--   every transaction that wrote task_instance has ended (their triggers read the old flag, and
--   this function's reads, each with a snapshot of its own, see what they committed), and no TI
--   is written until this transaction ends (their triggers then read the new flag).
-- LOCK: task_instance in SHARE mode until commit, only when include_deferred takes effect or stops
-- (a pool made or dropped with it, the flag changed, a pool with it renamed): TI writers wait for
-- this transaction, and it waits for theirs. Keep such a transaction short.
-- INVARIANT and CALLERS MAY ASSUME: those of track_usage_v1.
CREATE OR REPLACE FUNCTION track_pool_usage_v2()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.include_deferred
       AND (TG_OP = 'DELETE' OR NOT NEW.include_deferred OR NEW.name IS DISTINCT FROM OLD.name) THEN
        LOCK TABLE task_instance IN SHARE MODE;
        INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
        SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor, -count(*), -sum(ti.pool_slots)
        FROM task_instance ti WHERE ti.state = 'deferred' AND ti.pool = OLD.name
        GROUP BY ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.include_deferred
       AND (TG_OP = 'INSERT' OR NOT OLD.include_deferred OR NEW.name IS DISTINCT FROM OLD.name) THEN
        LOCK TABLE task_instance IN SHARE MODE;
        INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
        SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor, count(*), sum(ti.pool_slots)
        FROM task_instance ti WHERE ti.state = 'deferred' AND ti.pool = NEW.name
        GROUP BY ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor;
    END IF;
    RETURN NULL;
END;
$$;
