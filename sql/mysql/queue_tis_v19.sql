-- queue_tis_v19(max_tis, job_id, now, page_factor): on MySQL/MariaDB exactly queue_tis_v18, which
-- it calls (read sql/mysql/queue_tis_v18.sql, v17, v16, v15 and, for the contract,
-- sql/postgresql/queue_tis_v11.sql). The version exists for PostgreSQL, whose queue_tis_v19 reads
-- the limits of a batch's page rows once per group (the rows of one pool, run, task, width and
-- executor) and drops a row with as many members of its group ahead of it as the group can take
-- (greedy queues a prefix of each group): the drain of deep runs costs less. Not built here yet:
-- MariaDB's prune is its own statements over its own scratch tables. Both dialects name the same
-- procedures, and the named query `queue_tis` calls v19 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v18 (the row scheduler_lock('queue_tis'),
-- FOR UPDATE SKIP LOCKED: error 3572 ER_LOCK_NOWAIT at once when another scheduler holds it; the
-- gate rows of pools whose skip entries it makes).
CREATE PROCEDURE queue_tis_v19(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    CALL queue_tis_v18(p_max_tis, p_job_id, p_now, p_page_factor);
END
