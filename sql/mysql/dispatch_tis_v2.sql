-- dispatch_tis_v2 (MySQL/MariaDB): dispatch_tis_v1 (read sql/mysql/dispatch_tis_v1.sql: the same
-- arguments, result, lock, invariant and what callers may assume) that reads only the queued TIs
-- of its own executor. Why, and what it promises with several queues:
-- sql/postgresql/dispatch_tis_v2.sql. v1's locking cursor over `state = 'queued' AND executor =
-- ? ORDER BY ... LIMIT n` read every queued TI of every executor at every pass.
--
-- MySQL: the queue names holding queued TIs are walked with `SELECT MIN(queue) INTO ... WHERE
-- state = 'queued' AND queue > <the last name>` (one index probe each: a local variable is a
-- constant to the optimizer, where a correlated bound in one recursive statement read the whole
-- `queued` range, and neither DISTINCT nor GROUP BY got a loose index scan on the claim index).
-- Per queue, one locking cursor as v1's, on the claim index (state, queue, executor,
-- priority_weight DESC, queued_at, id; revision 0041) in order, at most `limit` due rows, into a
-- session temporary table; then the first `limit` of them by (priority_weight DESC, queued_at,
-- id) get their ti_dispatch row (a new token, attempt + 1) in one INSERT ... ON DUPLICATE KEY
-- UPDATE, and are returned. The cursor reads task_instance alone (the NOT EXISTS subquery
-- takes no locks); SKIP LOCKED relies on the engine's READ COMMITTED (docs/dialects.md).
-- Lock: the executor row FOR UPDATE, then the TIs read FOR UPDATE SKIP LOCKED (with several
-- queues, rows beyond the first `limit` stay locked until this short transaction commits) and
-- the ti_dispatch rows written.
CREATE PROCEDURE dispatch_tis_v2(IN p_executor VARCHAR(250), IN p_limit INT, IN p_resend_after_s DOUBLE,
                                 IN p_now DATETIME(6))
BEGIN
    DECLARE v_now    DATETIME(6);
    DECLARE v_cutoff DATETIME(6);
    DECLARE v_done   BOOLEAN DEFAULT FALSE;
    DECLARE v_id     BIGINT;
    DECLARE v_queued DATETIME(6);
    DECLARE v_pw     INT;
    DECLARE v_found  INT DEFAULT 0;
    DECLARE v_queues INT DEFAULT 0;
    DECLARE v_queue  VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_next   VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE c_due CURSOR FOR  -- one queue (v_queue, read when the cursor opens), in index order
        SELECT ti.id, ti.queued_at, ti.priority_weight FROM task_instance ti FORCE INDEX (task_instance_claim)
        WHERE ti.state = 'queued' AND ti.queue = v_queue AND ti.executor = p_executor
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
    CREATE TEMPORARY TABLE IF NOT EXISTS dispatch_tis_v2_due (
        id BIGINT PRIMARY KEY, queued_at DATETIME(6), priority_weight INT);
    CREATE TEMPORARY TABLE IF NOT EXISTS dispatch_tis_v2_keep (id BIGINT PRIMARY KEY);
    DELETE FROM dispatch_tis_v2_due;
    SELECT count(*) INTO v_found FROM executor e WHERE e.name = p_executor FOR UPDATE;
    IF v_found > 0 AND p_limit > 0 THEN
        SELECT MIN(ti.queue) INTO v_queue FROM task_instance ti FORCE INDEX (task_instance_claim)
        WHERE ti.state = 'queued';
        WHILE v_queue IS NOT NULL DO
            SET v_queues = v_queues + 1;
            SET v_done = FALSE;
            OPEN c_due;
            fetching: LOOP
                FETCH c_due INTO v_id, v_queued, v_pw;
                IF v_done THEN
                    LEAVE fetching;
                END IF;
                INSERT INTO dispatch_tis_v2_due (id, queued_at, priority_weight) VALUES (v_id, v_queued, v_pw);
            END LOOP;
            CLOSE c_due;
            SELECT MIN(ti.queue) INTO v_next FROM task_instance ti FORCE INDEX (task_instance_claim)
            WHERE ti.state = 'queued' AND ti.queue > v_queue;
            SET v_queue = v_next;
        END WHILE;
        IF v_queues > 1 THEN  -- keep the first p_limit of all queues' rows (the rest stay due)
            -- (A temporary table may appear once per statement: the kept ids go through a second one.)
            DELETE FROM dispatch_tis_v2_keep;
            INSERT INTO dispatch_tis_v2_keep (id)
            SELECT c.id FROM dispatch_tis_v2_due c ORDER BY c.priority_weight DESC, c.queued_at, c.id LIMIT p_limit;
            DELETE c FROM dispatch_tis_v2_due c LEFT JOIN dispatch_tis_v2_keep k ON k.id = c.id WHERE k.id IS NULL;
        END IF;
        INSERT INTO ti_dispatch (ti_id, executor, queued_at, token, attempt, sent_at)
        SELECT c.id, p_executor, c.queued_at, UUID(), 1, v_now FROM dispatch_tis_v2_due c
        ON DUPLICATE KEY UPDATE executor = VALUES(executor), queued_at = VALUES(queued_at), token = UUID(),
                                attempt = LEAST(attempt + 1, 2147483647), sent_at = VALUES(sent_at);
    END IF;

    SELECT d.ti_id, d.token, d.attempt, ti.queue, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number
    FROM dispatch_tis_v2_due i
    JOIN ti_dispatch d ON d.ti_id = i.id
    JOIN task_instance ti ON ti.id = i.id
    ORDER BY ti.priority_weight DESC, ti.queued_at, ti.id;
END
