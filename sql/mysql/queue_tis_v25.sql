-- queue_tis_v25(max_tis, job_id, now, page_factor): on MySQL/MariaDB exactly queue_tis_v24, which
-- it calls (read sql/mysql/queue_tis_v24.sql). The version exists for PostgreSQL, whose
-- queue_tis_v25 runs v23 with the planner's merge joins off (its scratch tables carry no
-- statistics, and a misestimate had step 3b sort every page row by five keys for a merge join).
-- Both dialects name the same procedures, and the named query `queue_tis` calls v25 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v24 (the row scheduler_lock('queue_tis'),
-- FOR UPDATE SKIP LOCKED: error 3572 ER_LOCK_NOWAIT at once when another scheduler holds it; a
-- pool's queue_skip_gate row until the commit when a skip entry is made; no limit is exceeded, a
-- TI is queued once).
CREATE PROCEDURE queue_tis_v25(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    CALL queue_tis_v24(p_max_tis, p_job_id, p_now, p_page_factor);
END
