-- track_pool_usage_v1(): the trigger function that keeps the usage counters right when a pool's
-- include_deferred changes (docs/critical-section.md, "Usage counters"). Row-level AFTER INSERT,
-- UPDATE and DELETE trigger usage_pool on pool. A deferred TI holds its place only in a pool
-- with include_deferred (see track_usage_v1): when a pool gains that flag (or is created with
-- it), its deferred TIs start to hold; when it loses it (or is dropped or renamed), they stop.
-- One usage_delta row per partition, as track_usage_v1 writes.
--
-- LOCK: the pool's deferred TIs, FOR SHARE, until commit: a TI that leaves `deferred` meanwhile
-- waits, and its own trigger then reads the pool's new flag (without the lock it could read the
-- old one and count the change twice).
-- INVARIANT and CALLERS MAY ASSUME: those of track_usage_v1.
CREATE OR REPLACE FUNCTION track_pool_usage_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.include_deferred
       AND (TG_OP = 'DELETE' OR NOT NEW.include_deferred OR NEW.name IS DISTINCT FROM OLD.name) THEN
        INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
        SELECT t.dag_run_id, t.dag_id, t.task_id, t.pool, t.executor, -count(*), -sum(t.pool_slots)
        FROM (SELECT ti.* FROM task_instance ti WHERE ti.state = 'deferred' AND ti.pool = OLD.name FOR SHARE) t
        GROUP BY t.dag_run_id, t.dag_id, t.task_id, t.pool, t.executor;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.include_deferred
       AND (TG_OP = 'INSERT' OR NOT OLD.include_deferred OR NEW.name IS DISTINCT FROM OLD.name) THEN
        INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
        SELECT t.dag_run_id, t.dag_id, t.task_id, t.pool, t.executor, count(*), sum(t.pool_slots)
        FROM (SELECT ti.* FROM task_instance ti WHERE ti.state = 'deferred' AND ti.pool = NEW.name FOR SHARE) t
        GROUP BY t.dag_run_id, t.dag_id, t.task_id, t.pool, t.executor;
    END IF;
    RETURN NULL;
END;
$$;
