-- queue_tis_v7(max_tis, job_id, now, page_factor): queue_tis_v6 (read
-- sql/postgresql/queue_tis_v6.sql for the contract: arguments, knobs, result, rule), preceded by
-- one check that lets an idle call cost what it decides, nothing:
--   * NOTHING TO DECIDE: no TI is `scheduled` and no pool_reservation row exists. Then no TI can
--     be queued and no reservation dropped or added (every step of v6 starts from a scheduled TI
--     or a reservation), so v7 only clears the knobs (they apply to one call) and returns no
--     row: without the lock, without folding the usage counters (the next call that has work
--     folds what accumulated), and without what a first v6 call in a new session costs (its
--     scratch tables created, ~40 statements planned: 65-85 ms measured on an idle database,
--     most of an idle `engine tick`'s queue_tis step).
--   * Otherwise: exactly queue_tis_v6.
-- Two index probes decide it (task_instance_queue_pool, state leading; pool_reservation's
-- primary key). A TI made scheduled by a transaction that commits after the probe is queued by
-- the next call, as if this call had come a moment earlier.
-- LOCK: none on the idle path; otherwise that of queue_tis_v6 (scheduler_lock('queue_tis'),
-- FOR UPDATE NOWAIT, SQLSTATE 55P03 at once when another scheduler holds it).
-- INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v6; an idle call changes nothing and is never
-- busy.
CREATE OR REPLACE FUNCTION queue_tis_v7(p_max_tis int, p_job_id bigint DEFAULT NULL,
                                        p_now timestamptz DEFAULT NULL, p_page_factor int DEFAULT 2)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int,
               try_number int, pool text, queue text, executor text, priority_weight int)
LANGUAGE plpgsql
SET jit = off
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM task_instance t WHERE t.state = 'scheduled')
       AND NOT EXISTS (SELECT 1 FROM pool_reservation x) THEN
        PERFORM set_config('engine.aging_rate', '', true), set_config('engine.aging_cap', '', true),
                set_config('engine.reserve_after', '', true);
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM queue_tis_v6(p_max_tis, p_job_id, p_now, p_page_factor);
END;
$$;
