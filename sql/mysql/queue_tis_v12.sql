-- queue_tis_v12(max_tis, job_id, now, page_factor): on MySQL/MariaDB exactly queue_tis_v11, which
-- it calls (and v11 calls v10, v10 calls v9: read sql/mysql/queue_tis_v9.sql). The version exists
-- for PostgreSQL, whose queue_tis_v12 checks the setting engine.skip_min before calling v11
-- (MySQL/MariaDB has no skip entries and no such setting). Both dialects name the same
-- procedures, and the named query `queue_tis` calls v12 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v9 (no lock when there is nothing to
-- decide; otherwise scheduler_lock('queue_tis'), FOR UPDATE SKIP LOCKED: error 3572
-- ER_LOCK_NOWAIT at once when another scheduler holds it).
CREATE PROCEDURE queue_tis_v12(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    CALL queue_tis_v11(p_max_tis, p_job_id, p_now, p_page_factor);
END
