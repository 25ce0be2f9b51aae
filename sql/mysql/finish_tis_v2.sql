-- finish_tis_v2(ti_ids, try_numbers, exit_codes, timed_outs, reasons, results, now, max_bytes):
-- on MySQL/MariaDB exactly finish_tis_v1, which it calls (read sql/mysql/finish_tis_v1.sql for
-- the contract). The version exists for PostgreSQL, whose finish_tis_v2 decides a whole batch in
-- a few statements instead of one finish_ti_v3 call per try; both dialects name the same
-- procedures, and the named query `finish_tis` calls v2 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of finish_tis_v1.
CREATE PROCEDURE finish_tis_v2(IN p_ti_ids LONGTEXT, IN p_try_numbers LONGTEXT, IN p_exit_codes LONGTEXT,
                               IN p_timed_outs LONGTEXT, IN p_reasons LONGTEXT, IN p_results LONGTEXT,
                               IN p_now DATETIME(6), IN p_max_bytes INT)
BEGIN
    CALL finish_tis_v1(p_ti_ids, p_try_numbers, p_exit_codes, p_timed_outs, p_reasons, p_results, p_now, p_max_bytes);
END
