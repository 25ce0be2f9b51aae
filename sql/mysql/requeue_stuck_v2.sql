-- requeue_stuck_v2(timeout_s, max_requeues, now): queued TIs that no worker claimed within
-- timeout_s (queued_at older) give their slot back: they return to `scheduled` (queued counts
-- against every limit, scheduled does not) with requeue_count + 1, and queue_tis picks
-- them again in their usual order. A TI already requeued max_requeues times becomes `failed`
-- instead, with state_reason saying why and a history row for the try it never got to run
-- (try_number + 1, no start_date). Returns (tis_requeued, tis_failed).
--
-- Lock: the stuck task_instance rows, FOR UPDATE SKIP LOCKED: a row a worker is claiming right
-- now is skipped (it is not stuck), and concurrent schedulers take disjoint rows.
-- Invariant: queued -> scheduled / failed only, as a compare-and-set on state 'queued'; a
-- dispatch that was lost never holds a slot for more than timeout_s, and a TI nobody can run
-- ends after a bounded number of requeues instead of cycling forever.
-- Callers may assume: it never waits on another scheduler or worker.
--
-- New in v2: no value stored in a TI makes it fail for everyone: try_number + 1 and
-- requeue_count + 1 (BIGINT in MySQL's integer arithmetic) saturate at 2,147,483,647
-- (INT32_MAX) instead of overflowing the INT columns (v1 raised "out of range" for every
-- scheduler pass while one stuck TI held such a value), and timeout_s is clamped into
-- [0, 3,153,600,000 s] (engine/validate.py MAX_SECONDS).
--
-- MySQL: a PROCEDURE whose final SELECT returns the counts. No data-modifying CTEs or
-- RETURNING: the stuck ids are taken by a locking cursor into a session temporary table, each
-- UPDATE counts its rows, and the history rows are selected from the TIs this call failed. The
-- UPDATEs are driven by the temporary table (STRAIGHT_JOIN: only those rows are read and
-- locked; see claim_tis_v2) and read requeue_count as the cursor saw it: MySQL does not promise the order of a
-- multi-table UPDATE's assignments, and each may see the ones before it. CONCAT prints a
-- DOUBLE like PostgreSQL's format('%s') does (600, 0.5).
CREATE PROCEDURE requeue_stuck_v2(IN p_timeout_s DOUBLE, IN p_max_requeues INT, IN p_now DATETIME(6))
BEGIN
    DECLARE v_now      DATETIME(6);
    DECLARE v_cutoff   DATETIME(6);
    DECLARE v_done     BOOLEAN DEFAULT FALSE;
    DECLARE v_id       BIGINT;
    DECLARE v_count    INT;
    DECLARE v_requeued INT;
    DECLARE v_failed   INT;
    DECLARE c_stuck CURSOR FOR
        SELECT ti.id, ti.requeue_count FROM task_instance ti
        WHERE ti.state = 'queued' AND ti.queued_at < v_cutoff
        FOR UPDATE SKIP LOCKED;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET p_timeout_s = LEAST(GREATEST(COALESCE(p_timeout_s, 0), 0), 3153600000);
    SET v_cutoff = v_now - INTERVAL ROUND(p_timeout_s * 1000000) MICROSECOND;
    CREATE TEMPORARY TABLE IF NOT EXISTS requeue_stuck_v2_ids (id BIGINT PRIMARY KEY, requeue_count INT);
    DELETE FROM requeue_stuck_v2_ids;
    OPEN c_stuck;
    fetching: LOOP
        FETCH c_stuck INTO v_id, v_count;
        IF v_done THEN
            LEAVE fetching;
        END IF;
        INSERT INTO requeue_stuck_v2_ids (id, requeue_count) VALUES (v_id, v_count);
    END LOOP;
    CLOSE c_stuck;

    UPDATE requeue_stuck_v2_ids s
    STRAIGHT_JOIN task_instance ti ON s.id = ti.id
    SET ti.state_reason = CONCAT('not claimed by a worker within ', p_timeout_s, ' s; requeued (',
                                 s.requeue_count + 1, ' of ', p_max_requeues, ')'),
        ti.state = 'scheduled', ti.requeue_count = LEAST(s.requeue_count + 1, 2147483647), ti.queued_at = NULL,
        ti.queued_by_job_id = NULL, ti.updated_at = v_now
    WHERE ti.state = 'queued' AND s.requeue_count < p_max_requeues;
    SET v_requeued = ROW_COUNT();

    UPDATE requeue_stuck_v2_ids s
    STRAIGHT_JOIN task_instance ti ON s.id = ti.id
    SET ti.state_reason = CONCAT('not claimed by a worker within ', p_timeout_s, ' s, ', s.requeue_count + 1,
                                 ' times; is a worker of queue ', ti.queue, ' running?'),
        ti.state = 'failed', ti.try_number = LEAST(ti.try_number + 1, 2147483647), ti.start_date = NULL,
        ti.end_date = v_now,
        ti.exit_code = NULL, ti.updated_at = v_now
    WHERE ti.state = 'queued' AND s.requeue_count >= p_max_requeues;
    SET v_failed = ROW_COUNT();

    -- The stuck rows are locked by this call: those now `failed` are the ones it failed.
    INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                       pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                       worker_job_id, log_path, reason)
    SELECT f.id, f.dag_id, f.run_id, f.task_id, f.map_index, f.try_number, 'failed', f.pool, f.pool_slots,
           f.queued_at, NULL, v_now, NULL, NULL, NULL, NULL, f.state_reason
    FROM requeue_stuck_v2_ids s
    JOIN task_instance f ON f.id = s.id
    WHERE f.state = 'failed';

    SELECT v_requeued AS tis_requeued, v_failed AS tis_failed;
END
