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
--
-- MySQL: a PROCEDURE whose final SELECT returns the rows. The locking cursor reads
-- task_instance alone (a join would lock ti_dispatch rows too; the NOT EXISTS subquery takes
-- no locks); each chosen TI's ti_dispatch row is then updated, or inserted when it has none.
-- The token is UUID(). SKIP LOCKED relies on the engine's READ COMMITTED (docs/dialects.md).
CREATE PROCEDURE dispatch_tis_v1(IN p_executor VARCHAR(250), IN p_limit INT, IN p_resend_after_s DOUBLE,
                                 IN p_now DATETIME(6))
BEGIN
    DECLARE v_now    DATETIME(6);
    DECLARE v_cutoff DATETIME(6);
    DECLARE v_done   BOOLEAN DEFAULT FALSE;
    DECLARE v_id     BIGINT;
    DECLARE v_queued DATETIME(6);
    DECLARE v_found  INT DEFAULT 0;
    DECLARE c_due CURSOR FOR
        SELECT ti.id, ti.queued_at FROM task_instance ti
        WHERE ti.state = 'queued' AND ti.executor = p_executor
          AND NOT EXISTS (SELECT 1 FROM ti_dispatch d
                          WHERE d.ti_id = ti.id AND d.queued_at <=> ti.queued_at AND d.sent_at > v_cutoff)
        ORDER BY ti.priority_weight DESC, ti.queued_at, ti.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET p_resend_after_s = LEAST(GREATEST(COALESCE(p_resend_after_s, 0), 0), 3153600000);
    SET v_cutoff = v_now - INTERVAL ROUND(p_resend_after_s * 1000000) MICROSECOND;
    SET p_limit = GREATEST(COALESCE(p_limit, 0), 0);
    CREATE TEMPORARY TABLE IF NOT EXISTS dispatch_tis_v1_ids (id BIGINT PRIMARY KEY);
    DELETE FROM dispatch_tis_v1_ids;
    SELECT count(*) INTO v_found FROM executor e WHERE e.name = p_executor FOR UPDATE;
    IF v_found > 0 THEN
        OPEN c_due;
        fetching: LOOP
            FETCH c_due INTO v_id, v_queued;
            IF v_done THEN
                LEAVE fetching;
            END IF;
            INSERT INTO dispatch_tis_v1_ids (id) VALUES (v_id);
            UPDATE ti_dispatch d
            SET d.executor = p_executor, d.queued_at = v_queued, d.token = UUID(),
                d.attempt = LEAST(d.attempt + 1, 2147483647), d.sent_at = v_now
            WHERE d.ti_id = v_id;
            IF ROW_COUNT() = 0 THEN
                INSERT INTO ti_dispatch (ti_id, executor, queued_at, token, attempt, sent_at)
                VALUES (v_id, p_executor, v_queued, UUID(), 1, v_now);
            END IF;
        END LOOP;
        CLOSE c_due;
    END IF;

    SELECT d.ti_id, d.token, d.attempt, ti.queue, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number
    FROM dispatch_tis_v1_ids i
    JOIN ti_dispatch d ON d.ti_id = i.id
    JOIN task_instance ti ON ti.id = i.id
    ORDER BY ti.priority_weight DESC, ti.queued_at, ti.id;
END
