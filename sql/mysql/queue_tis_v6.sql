-- queue_tis_v6(max_tis, job_id, now, page_factor): on MySQL/MariaDB, fold_usage_v1 (the usage
-- counters take in what changed since the last call) then exactly queue_tis_v4, which still
-- counts usage by reading the active TIs (read sql/mysql/queue_tis_v4.sql and
-- sql/postgresql/queue_tis_v4.sql for the contract). PostgreSQL's queue_tis_v6 reads the
-- counters instead; here the fold keeps usage_delta short, so that a MariaDB version reading the
-- counters finds them ready. Both dialects name the same procedures, and the named query
-- `queue_tis` calls v6 on both.
-- LOCK: scheduler_lock('queue_tis'), FOR UPDATE SKIP LOCKED, taken here before the fold, as
-- queue_tis_v4 takes it (error 3572 ER_LOCK_NOWAIT at once when another scheduler holds it; v4
-- then finds the row already locked by this transaction). INVARIANT, CALLERS MAY ASSUME: those of
-- queue_tis_v4.
CREATE PROCEDURE queue_tis_v6(IN p_max_tis INT, IN p_job_id BIGINT, IN p_now DATETIME(6), IN p_page_factor INT)
BEGIN
    DECLARE v_n INT;
    SELECT COUNT(*) INTO v_n FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE SKIP LOCKED;
    IF v_n = 0 THEN
        -- (A plain SELECT: a subquery in IF would take a shared lock and wait, in MariaDB.)
        SELECT COUNT(*) INTO v_n FROM scheduler_lock l WHERE l.name = 'queue_tis';
        IF v_n = 0 THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'scheduler_lock row queue_tis is missing; run `engine db upgrade`';
        END IF;
        SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 3572,
            MESSAGE_TEXT = 'queue_tis_v6 is busy: another scheduler holds scheduler_lock queue_tis';
    END IF;
    CALL fold_usage_v1(v_n);
    CALL queue_tis_v4(p_max_tis, p_job_id, p_now, p_page_factor);
END
