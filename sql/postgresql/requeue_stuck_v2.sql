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
-- requeue_count + 1 are computed in bigint and saturate at 2,147,483,647 (INT32_MAX) instead of
-- overflowing the int columns (v1 raised "integer out of range" for every scheduler pass while
-- one stuck TI held such a value), and timeout_s is clamped into [0, 3,153,600,000 s]
-- (engine/validate.py MAX_SECONDS; NaN counts as the maximum).
CREATE OR REPLACE FUNCTION requeue_stuck_v2(p_timeout_s double precision, p_max_requeues int,
                                            p_now timestamptz DEFAULT NULL)
RETURNS TABLE (tis_requeued int, tis_failed int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    v_timeout  double precision := least(greatest(coalesce(p_timeout_s, 0), 0), 3153600000);
    v_requeued int;
    v_failed   int;
BEGIN
    WITH stuck AS (
        SELECT ti.id FROM task_instance ti
        WHERE ti.state = 'queued' AND ti.queued_at < v_now - make_interval(secs => v_timeout)
        FOR UPDATE SKIP LOCKED
    ), requeued AS (
        UPDATE task_instance ti
        SET state = 'scheduled', requeue_count = least(ti.requeue_count::bigint + 1, 2147483647)::int, queued_at = NULL,
            queued_by_job_id = NULL, updated_at = v_now,
            state_reason = format('not claimed by a worker within %s s; requeued (%s of %s)',
                                  v_timeout, ti.requeue_count::bigint + 1, p_max_requeues)
        FROM stuck s
        WHERE ti.id = s.id AND ti.state = 'queued' AND ti.requeue_count < p_max_requeues
        RETURNING ti.id
    ), failed AS (
        UPDATE task_instance ti
        SET state = 'failed', try_number = least(ti.try_number::bigint + 1, 2147483647)::int, start_date = NULL,
            end_date = v_now,
            exit_code = NULL, updated_at = v_now,
            state_reason = format('not claimed by a worker within %s s, %s times; is a worker of queue %s running?',
                                  v_timeout, ti.requeue_count::bigint + 1, ti.queue)
        FROM stuck s
        WHERE ti.id = s.id AND ti.state = 'queued' AND ti.requeue_count >= p_max_requeues
        RETURNING ti.*
    ), history AS (
        INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                           pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                           worker_job_id, log_path, reason)
        SELECT f.id, f.dag_id, f.run_id, f.task_id, f.map_index, f.try_number, 'failed', f.pool, f.pool_slots,
               f.queued_at, NULL, v_now, NULL, NULL, NULL, NULL, f.state_reason
        FROM failed f
    )
    SELECT (SELECT count(*) FROM requeued), (SELECT count(*) FROM failed) INTO v_requeued, v_failed;
    RETURN QUERY SELECT v_requeued, v_failed;
END;
$$;
