-- queue_tis_v5(max_tis, job_id, now, page_factor): on MySQL/MariaDB exactly queue_tis_v4, which
-- it calls (read sql/mysql/queue_tis_v4.sql and sql/postgresql/queue_tis_v4.sql for the
-- contract). The version exists for PostgreSQL, whose queue_tis_v5 keeps its scratch tables'
-- rows past the commit (no truncation and no replanning at every call) and sizes each pool's
-- page by its share of what is left to queue. Neither carries over: MariaDB's temporary tables
-- are not truncated at commit, and the share-sized pages made MariaDB's small passes slower
-- (p50 45 -> 63 ms at max_tis 32, interleaved calls; its pages are read pool by pool by a
-- cursor, so fewer rows per page meant more batches). Both dialects name the same procedures,
-- and the named query `queue_tis` calls v5 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v4 (scheduler_lock('queue_tis'),
-- FOR UPDATE SKIP LOCKED: error 3572 ER_LOCK_NOWAIT at once when another scheduler holds it).
CREATE PROCEDURE queue_tis_v5(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    CALL queue_tis_v4(p_max_tis, p_job_id, p_now, p_page_factor);
END
