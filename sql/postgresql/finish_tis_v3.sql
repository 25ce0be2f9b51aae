-- finish_tis_v3(ti_ids, try_numbers, exit_codes, timed_outs, reasons, results, now, max_bytes): on
-- PostgreSQL exactly finish_tis_v2, which it calls (read sql/postgresql/finish_tis_v2.sql for the
-- contract). The version exists for MySQL/MariaDB, whose finish_tis_v3 decides the whole batch in a
-- fixed number of statements instead of one finish_ti_v3 call per try (its v2 called v1, which
-- does that); both dialects name the same procedures, and the named query `finish_tis` calls v3 on
-- both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of finish_tis_v2.
CREATE OR REPLACE FUNCTION finish_tis_v3(p_ti_ids bigint[], p_try_numbers int[], p_exit_codes int[],
                                         p_timed_outs boolean[], p_reasons text[], p_results text[],
                                         p_now timestamptz DEFAULT NULL, p_max_bytes int DEFAULT NULL)
RETURNS TABLE (ti_id bigint, try_number int, state text)
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY SELECT * FROM finish_tis_v2(p_ti_ids, p_try_numbers, p_exit_codes, p_timed_outs, p_reasons,
                                             p_results, p_now, p_max_bytes);
END;
$$;
