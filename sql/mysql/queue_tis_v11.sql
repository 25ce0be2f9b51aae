-- queue_tis_v11(max_tis, job_id, now, page_factor): on MySQL/MariaDB exactly queue_tis_v10, which
-- it calls (and v10 calls v9: read sql/mysql/queue_tis_v9.sql). The version exists for
-- PostgreSQL, whose queue_tis_v11 keeps skip entries: where the first TIs of a pool in queue
-- order are all refused by full partitions or by their width, a call reads past them without
-- reading them again while those partitions stay full. It needs to know which TIs were written
-- since an earlier call, which PostgreSQL tells by transaction ids (stamp_scheduled_v1);
-- MySQL/MariaDB has no equivalent a query can use. Both dialects name the same procedures, and
-- the named query `queue_tis` calls v11 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v9 (no lock when there is nothing to
-- decide; otherwise scheduler_lock('queue_tis'), FOR UPDATE SKIP LOCKED: error 3572
-- ER_LOCK_NOWAIT at once when another scheduler holds it).
CREATE PROCEDURE queue_tis_v11(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    CALL queue_tis_v10(p_max_tis, p_job_id, p_now, p_page_factor);
END
