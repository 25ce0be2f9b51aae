-- queue_tis_v20(max_tis, job_id, now, page_factor): on MySQL/MariaDB exactly queue_tis_v19, which
-- it calls (read sql/mysql/queue_tis_v19.sql). The version exists for PostgreSQL, whose
-- queue_tis_v20 numbers a batch's partitions once per group instead of once per candidate row.
-- The same change was built and measured here too (a drain of 100,000 at max_tis 512, calls
-- alternating with v19's on one world): with the groups in an Aria scratch table, each
-- candidate's lookup of its group cost ~10 us and the call was 7 % slower; in a MEMORY table with
-- a hash key, 6 % faster, but a MEMORY table has a fixed size (max_heap_table_size) that a batch's
-- groups could fill, failing the call. So MariaDB keeps v19's statement. Both dialects name the
-- same procedures, and the named query `queue_tis` calls v20 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v19 (the row scheduler_lock('queue_tis'),
-- FOR UPDATE SKIP LOCKED: error 3572 ER_LOCK_NOWAIT at once when another scheduler holds it; a
-- pool's queue_skip_gate row until the commit when a skip entry is made; no limit is exceeded, a
-- TI is queued once).
CREATE PROCEDURE queue_tis_v20(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    CALL queue_tis_v19(p_max_tis, p_job_id, p_now, p_page_factor);
END
