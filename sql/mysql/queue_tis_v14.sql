-- queue_tis_v14(max_tis, job_id, now, page_factor): on MySQL/MariaDB exactly queue_tis_v9, which
-- it calls (read sql/mysql/queue_tis_v9.sql; v10 to v13 are v9 too there). The version
-- exists for PostgreSQL, whose queue_tis_v14 checks what v11's skip entries rely on (its setting,
-- and transaction ids restored from another cluster) before calling v11; MySQL/MariaDB has no
-- skip entries. Both dialects name the same procedures, and the named query `queue_tis` calls
-- v14 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v9 (no lock when there is nothing to
-- decide; otherwise scheduler_lock('queue_tis'), FOR UPDATE SKIP LOCKED: error 3572
-- ER_LOCK_NOWAIT at once when another scheduler holds it).
CREATE PROCEDURE queue_tis_v14(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    CALL queue_tis_v9(p_max_tis, p_job_id, p_now, p_page_factor);
END
