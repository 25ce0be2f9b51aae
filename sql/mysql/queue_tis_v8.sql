-- queue_tis_v8(max_tis, job_id, now, page_factor): on MySQL/MariaDB exactly queue_tis_v7, which
-- it calls (read sql/mysql/queue_tis_v7.sql and sql/postgresql/queue_tis_v8.sql for the
-- contract). The version exists for PostgreSQL, whose queue_tis_v8 ends a batch at a full page
-- only when that page's pool can still take a TI there (v6 ended it at every full page). MariaDB's
-- walk (queue_tis_v4: window passes over the batch, no array walk) is not changed by it. Both
-- dialects name the same procedures, and the named query `queue_tis` calls v8 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v7 (no lock when there is nothing to
-- decide; otherwise scheduler_lock('queue_tis'), FOR UPDATE SKIP LOCKED: error 3572
-- ER_LOCK_NOWAIT at once when another scheduler holds it).
CREATE PROCEDURE queue_tis_v8(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    CALL queue_tis_v7(p_max_tis, p_job_id, p_now, p_page_factor);
END
