-- queue_tis_v23(max_tis, job_id, now, page_factor): on MySQL/MariaDB exactly queue_tis_v22, which
-- it calls (v22 calls v21, v21 v20, and v20 calls v19: read sql/mysql/queue_tis_v19.sql). The
-- version exists for PostgreSQL, whose queue_tis_v23 counts a batch's check points over its
-- candidates instead of its whole page (MySQL/MariaDB's v19 has no check points: a batch there
-- ends at the earliest last row of a full page). Both dialects name the same procedures, and the named query
-- `queue_tis` calls v23 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v19 (the row scheduler_lock('queue_tis'),
-- FOR UPDATE SKIP LOCKED: error 3572 ER_LOCK_NOWAIT at once when another scheduler holds it; a
-- pool's queue_skip_gate row until the commit when a skip entry is made; no limit is exceeded, a
-- TI is queued once).
CREATE PROCEDURE queue_tis_v23(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    CALL queue_tis_v22(p_max_tis, p_job_id, p_now, p_page_factor);
END
