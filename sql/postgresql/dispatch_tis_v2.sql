-- dispatch_tis_v2(executor, limit, resend_after_s, now): dispatch_tis_v1 (read
-- sql/postgresql/dispatch_tis_v1.sql: the same arguments, result, lock, invariant and what callers
-- may assume) that reads only the queued TIs of its own executor.
--
-- v1 picked its TIs with `state = 'queued' AND executor = ? ... ORDER BY priority_weight DESC,
-- queued_at, id LIMIT n`: no index has the executor next to the state, so every pass read every
-- queued TI of every executor (a seq scan or the claim index's whole `queued` range) and sorted
-- the ones of its executor. A dispatcher passes every dispatch_interval and, on PostgreSQL, at
-- every notification that TIs were queued, so beside a backlog of the database queue's TIs each
-- pass cost a read of all of them (36 ms with 30,000 queued). v2 reads the claim index (state,
-- queue, executor, priority_weight DESC, queued_at, id; revision 0041) queue by queue, as
-- claim_tis_v3 does: the queue names holding queued TIs by a skip scan (one index probe per
-- name), then per queue its executor's queued TIs in dispatch order, skipping those with a
-- message in flight, at most `limit` each, locked as they are read (SKIP LOCKED); the first
-- `limit` of all of them in that order are dispatched. The same TIs as v1 (the order within a
-- queue is the index's, and the first `limit` of each queue's first `limit` are the first
-- `limit` overall). What a pass still reads: one index entry per queue name, and its own
-- executor's TIs in flight ahead of the ones it sends (a message in flight has the TI's
-- priority, so they come first).
-- With several queues, TIs beyond the first `limit` may stay locked until this short
-- transaction commits: a start_ti_v1 for one of them waits for that commit; none is lost or
-- sent twice (they stay due and go with the next pass).
--
-- Plans: the result's TIs are read by primary key one by one (a LATERAL subquery that OFFSET 0
-- keeps from being flattened into a join): after five calls PostgreSQL may keep a generic plan,
-- which guessed 6,250 rows for `LIMIT v_limit` and joined them to a hash of the whole
-- task_instance table (a sequential scan: 100-140 ms a pass at 100,000 TIs against 30-50). JIT is off for the function (as for queue_tis_v5): the planner counts 100 rows for
-- the recursive queue list, so a pass is costed past jit_above_cost and compiled for tens of
-- milliseconds in a session that has JIT on (the engine's own connections turn it off).
--
-- LOCK: the executor row FOR UPDATE (dispatchers of one executor take turns), then the TIs read
-- FOR UPDATE SKIP LOCKED. INVARIANT and CALLERS MAY ASSUME: v1's.
CREATE OR REPLACE FUNCTION dispatch_tis_v2(p_executor text, p_limit int, p_resend_after_s double precision,
                                           p_now timestamptz DEFAULT NULL)
RETURNS TABLE (ti_id bigint, token text, attempt int, queue text, dag_id text, run_id text, task_id text,
               map_index int, try_number int)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_now    timestamptz := coalesce(p_now, now());
    v_resend double precision := least(greatest(coalesce(p_resend_after_s, 0), 0), 3153600000);
    v_cutoff timestamptz;
    v_limit  int := greatest(coalesce(p_limit, 0), 0);
BEGIN
    IF p_resend_after_s = 'NaN'::double precision THEN
        v_resend := 3153600000;
    END IF;
    v_cutoff := v_now - make_interval(secs => v_resend);
    PERFORM 1 FROM executor e WHERE e.name = p_executor FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH RECURSIVE queues (name) AS (  -- a skip scan of task_instance_claim: one probe per queue name
        SELECT (SELECT min(x.queue) FROM task_instance x WHERE x.state = 'queued')
        UNION ALL
        SELECT (SELECT min(x.queue) FROM task_instance x WHERE x.state = 'queued' AND x.queue > q.name)
        FROM queues q
        WHERE q.name IS NOT NULL
    ), due AS (
        SELECT ti.id, ti.queued_at, ti.attempt
        FROM queues q
        CROSS JOIN LATERAL (  -- one queue, in index order, locking only what it returns
            SELECT x.id, x.queued_at, x.priority_weight, coalesce(d.attempt, 0) AS attempt
            FROM task_instance x
            LEFT JOIN ti_dispatch d ON d.ti_id = x.id
            WHERE x.state = 'queued' AND x.queue = q.name AND x.executor = p_executor
              AND (d.ti_id IS NULL OR d.queued_at IS DISTINCT FROM x.queued_at OR d.sent_at <= v_cutoff)
            ORDER BY x.priority_weight DESC, x.queued_at, x.id
            LIMIT v_limit
            FOR UPDATE OF x SKIP LOCKED
        ) ti
        WHERE q.name IS NOT NULL
        ORDER BY ti.priority_weight DESC, ti.queued_at, ti.id
        LIMIT v_limit
    ), sent AS (
        INSERT INTO ti_dispatch AS x (ti_id, executor, queued_at, token, attempt, sent_at)
        SELECT d.id, p_executor, d.queued_at, gen_random_uuid()::text, least(d.attempt::bigint + 1, 2147483647)::int,
               v_now
        FROM due d
        ON CONFLICT ON CONSTRAINT ti_dispatch_pkey DO UPDATE
        SET executor = excluded.executor, queued_at = excluded.queued_at, token = excluded.token,
            attempt = excluded.attempt, sent_at = excluded.sent_at
        RETURNING x.ti_id, x.token, x.attempt
    )
    SELECT s.ti_id, s.token::text, s.attempt, ti.queue::text, ti.dag_id::text, ti.run_id::text, ti.task_id::text,
           ti.map_index, ti.try_number
    FROM sent s
    CROSS JOIN LATERAL (SELECT * FROM task_instance x WHERE x.id = s.ti_id OFFSET 0) ti  -- OFFSET 0: kept a lateral probe
    ORDER BY ti.priority_weight DESC, ti.queued_at, ti.id;
END;
$$;
