-- track_pool_usage_v2(old name, old include_deferred, new name, new include_deferred): on
-- MySQL/MariaDB, what the triggers usage_pool_insert, usage_pool_update and usage_pool_delete
-- (AFTER INSERT, UPDATE, DELETE ON pool FOR EACH ROW; revision 0044) call. track_pool_usage_v1
-- (read sql/mysql/track_pool_usage_v1.sql and sql/postgresql/track_pool_usage_v1.sql for what it
-- counts) with one change, a fix: THE POOL'S DEFERRED TIs ARE COUNTED BY A LOCKING READ, and
-- revision 0044's TI triggers read the pool's flag by one (track_usage_v2, usage_ti_update).
--   v1's TI triggers read include_deferred with a plain read: a TI entering `deferred` while a
--   flag change was not committed read the old flag, and the change's count had not seen it
--   (counted by neither: the counters drifted from the recount; an undercount lets queue_tis
--   exceed that pool's limits). Now a TI writer that enters or leaves `deferred` holds the pool's
--   row shared until it commits, so the pool's UPDATE waits for it, and one that comes during the
--   change waits for its commit and then reads the new flag. v1 counted with a plain INSERT ...
--   SELECT after a locking COUNT: a plain read uses the statement's read view, which an UPDATE of
--   pool with a subquery opens before it waits; here the INSERT ... SELECT is the locking read.
-- LOCK: the pool's deferred TIs, shared, until commit; the pool row itself is the UPDATE's.
-- INVARIANT and CALLERS MAY ASSUME: those of track_usage_v1.
CREATE PROCEDURE track_pool_usage_v2(IN o_name VARCHAR(250), IN o_inc BOOLEAN, IN n_name VARCHAR(250),
                                     IN n_inc BOOLEAN)
BEGIN
    IF COALESCE(o_inc, FALSE) AND NOT (COALESCE(n_inc, FALSE) AND o_name <=> n_name) THEN
        INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
        SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor, -COUNT(*), -SUM(ti.pool_slots)
        FROM task_instance ti WHERE ti.state = 'deferred' AND ti.pool = o_name
        GROUP BY ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor
        LOCK IN SHARE MODE;
    END IF;
    IF COALESCE(n_inc, FALSE) AND NOT (COALESCE(o_inc, FALSE) AND o_name <=> n_name) THEN
        INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
        SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor, COUNT(*), SUM(ti.pool_slots)
        FROM task_instance ti WHERE ti.state = 'deferred' AND ti.pool = n_name
        GROUP BY ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor
        LOCK IN SHARE MODE;
    END IF;
END
