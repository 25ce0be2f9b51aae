-- dispatch_tis_v1(executor, limit, resend_after_s, now): hand queued TIs of an executor that is
-- not the database queue (e.g. 'celery') to its dispatcher. Returns up to `limit` queued TIs of
-- `executor` that have no message in flight, highest priority first, each with a fresh
-- dispatch token (a random uuid) and attempt number, recorded in ti_dispatch. The dispatcher
-- sends one message per row carrying (ti_id, token); only start_ti_v1 with the current token
-- can start the try.
-- A TI has a message in flight while its ti_dispatch row belongs to its current queued period
-- (same queued_at) and was sent less than resend_after_s ago. A row sent earlier than that
-- (its message was lost: broker down, dispatcher killed between this call and the send, a
-- worker that took the message and died before it started the try) is re-sent with a NEW
-- token and attempt + 1: the old message, if it still arrives, can no longer start anything.
-- A row left from an earlier queued period (the TI was requeued, cleared or resumed since) is
-- replaced at once.
--
-- Lock: the executor row, FOR UPDATE (dispatchers of one executor take turns; held for this
-- short transaction), then the chosen task_instance rows FOR UPDATE SKIP LOCKED (a TI being
-- started or finished right now is left for the next pass).
-- Invariant: at most one valid token per TI at any time: never two messages that can start.
-- The TI stays `queued` (it holds its slots as before): dispatching changes no state, so a
-- broker outage keeps TIs queued and loses nothing.
-- Callers may assume: every returned row is to be sent once; a send that fails needs nothing
-- done (the row is re-sent after resend_after_s). resend_after_s is clamped into
-- [0, 3,153,600,000 s] (NaN counts as the maximum).
CREATE OR REPLACE FUNCTION dispatch_tis_v1(p_executor text, p_limit int, p_resend_after_s double precision,
                                           p_now timestamptz DEFAULT NULL)
RETURNS TABLE (ti_id bigint, token text, attempt int, queue text, dag_id text, run_id text, task_id text,
               map_index int, try_number int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := coalesce(p_now, now());
    v_resend double precision := least(greatest(coalesce(p_resend_after_s, 0), 0), 3153600000);
BEGIN
    IF p_resend_after_s = 'NaN'::double precision THEN
        v_resend := 3153600000;
    END IF;
    PERFORM 1 FROM executor e WHERE e.name = p_executor FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH due AS (
        SELECT ti.id, ti.queued_at, coalesce(d.attempt, 0) AS attempt
        FROM task_instance ti
        LEFT JOIN ti_dispatch d ON d.ti_id = ti.id
        WHERE ti.state = 'queued' AND ti.executor = p_executor
          AND (d.ti_id IS NULL OR d.queued_at IS DISTINCT FROM ti.queued_at
               OR d.sent_at <= v_now - make_interval(secs => v_resend))
        ORDER BY ti.priority_weight DESC, ti.queued_at, ti.id
        LIMIT greatest(p_limit, 0)
        FOR UPDATE OF ti SKIP LOCKED
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
    FROM sent s JOIN task_instance ti ON ti.id = s.ti_id
    ORDER BY ti.priority_weight DESC, ti.queued_at, ti.id;
END;
$$;
