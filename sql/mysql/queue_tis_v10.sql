-- queue_tis_v10(max_tis, job_id, now, page_factor): on MySQL/MariaDB exactly queue_tis_v9, which
-- it calls (read sql/mysql/queue_tis_v9.sql). The version exists for PostgreSQL, whose
-- queue_tis_v10 keeps 4 page rows of slack per pool instead of 8 (its walk passes a full page
-- whose pool is full; MariaDB's walk, v4's, ends every batch at the earliest full page, and the
-- same change there made small passes slower: p50 43-46 -> 64-67 ms, interleaved calls) and reads
-- a run's DAG through dag_run for its full-partition hints (MariaDB's v9 already does). Both
-- dialects name the same procedures, and the named query `queue_tis` calls v10 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v9 (no lock when there is nothing to
-- decide; otherwise scheduler_lock('queue_tis'), FOR UPDATE SKIP LOCKED: error 3572
-- ER_LOCK_NOWAIT at once when another scheduler holds it).
CREATE PROCEDURE queue_tis_v10(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    CALL queue_tis_v9(p_max_tis, p_job_id, p_now, p_page_factor);
END
