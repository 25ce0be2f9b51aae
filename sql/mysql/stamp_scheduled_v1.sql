-- stamp_scheduled_v1(ti_id, pool): on MySQL/MariaDB, what the triggers stamp_scheduled_insert and
-- stamp_scheduled_update (AFTER INSERT / AFTER UPDATE ON task_instance FOR EACH ROW, when
-- NEW.state = 'scheduled'; revision 0030) call for every row version of a scheduled TI, written by
-- any client or procedure. PostgreSQL's stamp_scheduled_v1 stamps the writing transaction's id
-- instead; InnoDB offers no transaction id a query can compare with a snapshot, so here the
-- writer and queue_tis_v15 meet on a row lock:
--   * THE GATE. The writer takes a shared lock on its pool's row of queue_skip_gate (INSERT IGNORE:
--     a new row, locked exclusively, or a shared lock on the existing one), held until it commits.
--     queue_tis_v15 makes a NEW skip entry for a pool only while it holds that row exclusively
--     (FOR UPDATE SKIP LOCKED: it never waits; a locked gate means no new entry this call). So a
--     writer still open while an entry is made is impossible, and one that commits first is seen.
--   * THE LOG. Under that lock the writer reads whether its pool has a skip entry (queue_skip: one
--     made before its lock, since making one needs the gate); if so it appends the TI's id to
--     queue_skip_log. Every TI of a pool with an entry that was written scheduled after the entry
--     saw the pool is in the log until a call of queue_tis_v15 has read it and covered it.
-- LOCK: the shared (or, for a pool's first row, exclusive) lock on queue_skip_gate's row of the
-- pool, until the writer's commit; a writer waits only for a queue_tis_v15 call that is making an
-- entry for that pool (until its commit). INVARIANT: a scheduled TI of a pool with a skip entry,
-- written after the entry was made, has a queue_skip_log row (queue_tis_v15 deletes it only
-- once it covered the TI or no longer needs to know). CALLERS MAY ASSUME: nothing; the server
-- calls it.
CREATE PROCEDURE stamp_scheduled_v1(IN p_ti_id BIGINT, IN p_pool VARCHAR(250))
BEGIN
    DECLARE v_entry INT;
    INSERT IGNORE INTO queue_skip_gate (pool) VALUES (p_pool);
    -- (SELECT ... INTO, not a subquery in IF: MariaDB would take a shared lock there.)
    SELECT COUNT(*) INTO v_entry FROM queue_skip s WHERE s.pool = p_pool;
    IF v_entry > 0 THEN
        INSERT INTO queue_skip_log (ti_id) VALUES (p_ti_id);
    END IF;
END
