-- finish_tis_v1(ti_ids, try_numbers, exit_codes, timed_outs, reasons, results, now, max_bytes):
-- a worker reports how many tries ended in one call: element i of each array describes one try
-- (its TI id, try number, exit code, whether it timed out, the reason or NULL, the result as
-- JSON text or NULL). Each try ends exactly as one finish_ti_v3 call with those values would end
-- it (success / skipped / up_for_retry / failed, the history row, task_result, retry_at): this
-- function calls finish_ti_v3 for each element, so their meaning cannot drift apart. p_max_bytes
-- (the setting max_result_bytes) applies to every result.
-- Returns one row (ti_id, try_number, state) per element, in TI id order: the new state, or NULL
-- when that report is stale (the TI is no longer running that try: reset as an orphan, cleared,
-- stopped by an operator, or the report came twice). A NULL or missing array element means
-- what finish_ti_v3 makes of NULL (exit NULL: a failed try; timed_out NULL: false).
--
-- Lock: each TI's task_instance row, FOR UPDATE (inside finish_ti_v3), one after the other in TI
-- id order (the order of every batch that locks TI rows: fire_triggers_v1, claim_tis), then its
-- task_result row; all held until the caller's transaction ends.
-- Invariant: fenced per try as finish_ti_v3: a report changes a TI only while it is running
-- that very try (state + try_number compare-and-set), so a late or duplicate report in a batch
-- never changes a newer try; one history row per finished try.
-- Callers may assume: it raises only for what finish_ti_v3 raises for (no value stored in task
-- or task_instance makes it raise), or when the arrays' lengths differ (nothing is changed then).
CREATE OR REPLACE FUNCTION finish_tis_v1(p_ti_ids bigint[], p_try_numbers int[], p_exit_codes int[],
                                         p_timed_outs boolean[], p_reasons text[], p_results text[],
                                         p_now timestamptz DEFAULT NULL, p_max_bytes int DEFAULT NULL)
RETURNS TABLE (ti_id bigint, try_number int, state text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_n   int := coalesce(cardinality(p_ti_ids), 0);
    r     record;
BEGIN
    IF coalesce(cardinality(p_try_numbers), 0) <> v_n OR coalesce(cardinality(p_exit_codes), 0) <> v_n
       OR (cardinality(p_timed_outs) IS NOT NULL AND cardinality(p_timed_outs) <> v_n)
       OR (cardinality(p_reasons) IS NOT NULL AND cardinality(p_reasons) <> v_n)
       OR (cardinality(p_results) IS NOT NULL AND cardinality(p_results) <> v_n) THEN
        RAISE EXCEPTION 'finish_tis_v1: the arrays describe % tries but have different lengths; send one element '
                        'per try in each', v_n;
    END IF;
    FOR r IN
        SELECT p_ti_ids[i] AS id, p_try_numbers[i] AS try, p_exit_codes[i] AS code, p_timed_outs[i] AS timed,
               p_reasons[i] AS reason, p_results[i] AS result
        FROM generate_subscripts(p_ti_ids, 1) AS i
        ORDER BY p_ti_ids[i], i
    LOOP
        ti_id := r.id;
        try_number := r.try;
        state := finish_ti_v3(r.id, r.try, r.code, coalesce(r.timed, false), r.reason, v_now, r.result, p_max_bytes);
        RETURN NEXT;
    END LOOP;
END;
$$;
