-- recount_usage_v1(OUT n): repairs the usage counters: one correction row in usage_delta per
-- partition where usage_drift shows a difference (recounted - counted); n = how many. The
-- MySQL/MariaDB side of sql/postgresql/recount_usage_v1.sql (read it for the contract). Call it
-- after a TRUNCATE of task_instance (MySQL/MariaDB run no trigger on TRUNCATE).
-- LOCK: none; one INSERT ... SELECT, whose read sees counters, deltas and TIs at one instant.
CREATE PROCEDURE recount_usage_v1(OUT p_n INT)
BEGIN
    INSERT INTO usage_delta (kind, dag_run_id, dag_id, task_id, pool, executor, n, slots)
    SELECT u.kind, u.dag_run_id, u.dag_id, u.task_id, u.pool, u.executor,
           CASE WHEN u.kind = 'pool' THEN 0 ELSE u.recounted - u.counted END,
           CASE WHEN u.kind = 'pool' THEN u.recounted - u.counted ELSE 0 END
    FROM usage_drift u;
    SET p_n = ROW_COUNT();
END
