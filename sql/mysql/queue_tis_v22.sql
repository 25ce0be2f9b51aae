-- queue_tis_v22(max_tis, job_id, now, page_factor): on MySQL/MariaDB exactly queue_tis_v21, which
-- it calls (v21 calls v20, and v20 calls v19: read sql/mysql/queue_tis_v19.sql). The version exists
-- for PostgreSQL, whose queue_tis_v22 reads a pool's refused head for its reasons only when the
-- head is long enough for a skip entry (MySQL/MariaDB's v19 counts that head before reading it
-- already). Both dialects name the same procedures, and the named query `queue_tis` calls v22 on
-- both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v19 (the row scheduler_lock('queue_tis'),
-- FOR UPDATE SKIP LOCKED: error 3572 ER_LOCK_NOWAIT at once when another scheduler holds it; a
-- pool's queue_skip_gate row until the commit when a skip entry is made; no limit is exceeded, a
-- TI is queued once).
CREATE PROCEDURE queue_tis_v22(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    CALL queue_tis_v21(p_max_tis, p_job_id, p_now, p_page_factor);
END
