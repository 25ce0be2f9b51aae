-- track_pool_usage_v1(old name, old include_deferred, new name, new include_deferred): keeps
-- the usage counters right when a pool's include_deferred changes; the MySQL/MariaDB side of
-- sql/postgresql/track_pool_usage_v1.sql (read it for the contract). Row-level AFTER INSERT,
-- UPDATE and DELETE triggers on pool (usage_pool_insert, usage_pool_update, usage_pool_delete)
-- call it (NULLs for the side that does not exist).
-- LOCK: the pool's deferred TIs, shared, until commit (a TI leaving `deferred` meanwhile waits
-- and then reads the new flag).
CREATE PROCEDURE track_pool_usage_v1(IN o_name VARCHAR(250), IN o_inc BOOLEAN, IN n_name VARCHAR(250),
                                     IN n_inc BOOLEAN)
BEGIN
    DECLARE v_n INT;
    IF COALESCE(o_inc, FALSE) AND NOT (COALESCE(n_inc, FALSE) AND o_name <=> n_name) THEN
        SELECT COUNT(*) INTO v_n FROM task_instance ti WHERE ti.state = 'deferred' AND ti.pool = o_name
        LOCK IN SHARE MODE;
        INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
        SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor, -COUNT(*), -SUM(ti.pool_slots)
        FROM task_instance ti WHERE ti.state = 'deferred' AND ti.pool = o_name
        GROUP BY ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor;
    END IF;
    IF COALESCE(n_inc, FALSE) AND NOT (COALESCE(o_inc, FALSE) AND o_name <=> n_name) THEN
        SELECT COUNT(*) INTO v_n FROM task_instance ti WHERE ti.state = 'deferred' AND ti.pool = n_name
        LOCK IN SHARE MODE;
        INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
        SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor, COUNT(*), SUM(ti.pool_slots)
        FROM task_instance ti WHERE ti.state = 'deferred' AND ti.pool = n_name
        GROUP BY ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor;
    END IF;
END
