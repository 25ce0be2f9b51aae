-- stamp_scheduled_v2(ti_id, pool): on MySQL/MariaDB, what the triggers stamp_scheduled_insert and
-- stamp_scheduled_update (AFTER INSERT / AFTER UPDATE ON task_instance FOR EACH ROW, when
-- NEW.state = 'scheduled'; revision 0043) call for every row version of a scheduled TI.
-- stamp_scheduled_v1 (the gate, the log: read sql/mysql/stamp_scheduled_v1.sql) with one change,
-- a fix: WHETHER THE POOL HAS A SKIP ENTRY IS READ FROM ITS GATE ROW, UNDER THE GATE'S LOCK.
--   v1 read queue_skip with a plain (consistent) read. A row trigger runs inside the writer's
--   statement, and InnoDB opens a statement's read view at its first consistent read: a statement
--   that read a table before it wrote its TI (UPDATE ... WHERE id = (SELECT ...), an INSERT ...
--   SELECT) had its view already when it waited here for the gate of a call making an entry, so
--   once that call committed, v1 still did not see the entry and logged nothing: the entry, its
--   bound past the TI (not committed when the call read the pool), hid it from every later call
--   (tests/test_queue_skip.py, "a writer whose statement read before it waited for the gate").
--   Here the flag queue_skip_gate.has_entry is read with a locking read, which reads the latest
--   committed row whatever the statement's view. It is kept by the triggers queue_skip_made (set
--   when an entry is inserted: the call holds the gate then, queue_tis_v18 and every version
--   before it) and queue_skip_dropped (cleared when an entry is deleted, if the gate can be had
--   without waiting; else it stays set, and writers log more than needed until the pool's next
--   entry is dropped). So a committed entry always has its flag set, and the flag changes only
--   under the gate held exclusively.
-- LOCK: v1's: the shared (for a pool's first row, exclusive) lock on the pool's row of
-- queue_skip_gate, until the writer commits; the locking read takes the lock the writer holds
-- already (never a second wait). INVARIANT: v1's (a scheduled TI of a pool with a skip entry,
-- written by a transaction that commits after the entry was made, has a queue_skip_log row).
-- CALLERS MAY ASSUME: nothing; the server calls it.
CREATE PROCEDURE stamp_scheduled_v2(IN p_ti_id BIGINT, IN p_pool VARCHAR(250))
BEGIN
    DECLARE v_entry BOOLEAN DEFAULT FALSE;
    INSERT IGNORE INTO queue_skip_gate (pool) VALUES (p_pool);
    -- (SELECT ... INTO, not a subquery in IF: MariaDB would take a shared lock there.)
    SELECT g.has_entry INTO v_entry FROM queue_skip_gate g WHERE g.pool = p_pool LOCK IN SHARE MODE;
    IF v_entry THEN
        INSERT INTO queue_skip_log (ti_id) VALUES (p_ti_id);
    END IF;
END
