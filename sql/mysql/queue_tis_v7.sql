-- queue_tis_v7(max_tis, job_id, now, page_factor): on MySQL/MariaDB, queue_tis_v6 (read
-- sql/mysql/queue_tis_v6.sql) preceded by the check of PostgreSQL's queue_tis_v7 (read
-- sql/postgresql/queue_tis_v7.sql): when no TI is `scheduled` and no pool_reservation row
-- exists, nothing can be decided, so the call clears the knobs (@engine_aging_rate,
-- @engine_aging_cap, @engine_reserve_after: they apply to one call) and returns the empty result
-- set, without the lock and without folding the usage counters; otherwise it is exactly
-- queue_tis_v6. (Plain SELECT ... INTO for the probes: a subquery in IF would take shared locks
-- and wait, in MariaDB.)
-- LOCK: none on the idle path; otherwise that of queue_tis_v6 (scheduler_lock('queue_tis'), FOR
-- UPDATE SKIP LOCKED, error 3572 at once when another scheduler holds it).
-- INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v6; an idle call changes nothing and is never
-- busy.
CREATE PROCEDURE queue_tis_v7(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    DECLARE v_scheduled INT;
    DECLARE v_reserved INT;
    SELECT COUNT(*) INTO v_scheduled FROM (SELECT 1 FROM task_instance t WHERE t.state = 'scheduled' LIMIT 1) s;
    SELECT COUNT(*) INTO v_reserved FROM (SELECT 1 FROM pool_reservation x LIMIT 1) r;
    IF v_scheduled = 0 AND v_reserved = 0 THEN
        SET @engine_aging_rate = NULL, @engine_aging_cap = NULL, @engine_reserve_after = NULL;
        -- the result set of a call that queued nothing (callers read one)
        SELECT ti.id AS ti_id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, ti.pool, ti.queue,
               ti.executor, ti.priority_weight
        FROM task_instance ti WHERE 1 = 0;
    ELSE
        CALL queue_tis_v6(p_max_tis, p_job_id, p_now, p_page_factor);
    END IF;
END
