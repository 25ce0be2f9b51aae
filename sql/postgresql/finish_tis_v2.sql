-- finish_tis_v2(ti_ids, try_numbers, exit_codes, timed_outs, reasons, results, now, max_bytes):
-- finish_tis_v1 (below: the same arguments, result, meaning and lock order), decided for the
-- whole batch at once instead of one finish_ti_v3 call per try.
--
-- New in v2: v1 ran ~6 statements per try (finish_ti_v3's lock, update, history insert and
-- task_result write), and each UPDATE of task_instance fired the usage trigger (track_usage_v1)
-- once per try: ~0.13 ms of database time per try, the largest share of a no-op TI's lifecycle
-- (loadtests/bench_lifecycle.py, docs/latency.md). v2 locks every reported TI in one statement,
-- then updates them, appends their history and writes their results in one statement each: one
-- usage trigger call per batch. The rules are finish_ti_v3's, written once more in SQL below;
-- tests/test_finish_tis.py checks v2 against v1 on random batches (stale, duplicate and
-- late reports, NULL elements, results that are not JSON or too big, retries and backoff).
--
-- As finish_tis_v1: a worker reports how many tries ended in one call; element i of each array
-- describes one try (TI id, try number, exit code, timed out, reason or NULL, result as JSON text
-- or NULL). Each try ends as finish_ti_v3 ends it:
--   exit 0                  -> success (its result, if any, stored in task_result)
--   exit 99 (not timed out) -> skipped
--   otherwise               -> up_for_retry while try_number <= max_tries (retry_at = now + delay;
--                              delay = retry_delay, or with exponential backoff retry_delay *
--                              2^(try_number - 1) capped by max_retry_delay (default one day),
--                              clamped into [0, 3,153,600,000 s]), else failed.
-- A result that is not plain JSON, or longer than p_max_bytes bytes, fails the try instead (exit
-- 1, the reason says why). Any try that does not end in success removes the TI's stored result.
-- Returns one row (ti_id, try_number, state) per element, in TI id order (then element order):
-- the new state, or NULL when that report is stale (the TI is not running that try). When one
-- batch holds several reports of one running try, the first of them (in element order) ends it
-- and the others are stale, exactly as v1's one-by-one calls decide.
--
-- Lock: every reported task_instance row, FOR UPDATE, taken in TI id order by one statement
-- (the order of every batch that locks TI rows: fire_triggers_v1, claim_tis), then the TIs'
-- task_result rows; all held until the caller's transaction ends.
-- Invariant: fenced per try: a report changes a TI only while it is running that very try
-- (state + try_number read under the row lock), so a late or duplicate report never changes a
-- newer try; one history row per finished try.
-- Callers may assume: it raises only when the arrays' lengths differ (nothing is changed then);
-- no value stored in task or task_instance makes it raise.
CREATE OR REPLACE FUNCTION finish_tis_v2(p_ti_ids bigint[], p_try_numbers int[], p_exit_codes int[],
                                         p_timed_outs boolean[], p_reasons text[], p_results text[],
                                         p_now timestamptz DEFAULT NULL, p_max_bytes int DEFAULT NULL)
RETURNS TABLE (ti_id bigint, try_number int, state text)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    c_max_s  CONSTANT double precision := 3153600000;  -- engine/validate.py MAX_SECONDS
    v_now    timestamptz := coalesce(p_now, now());
    v_n      int := coalesce(cardinality(p_ti_ids), 0);
    v_values jsonb[];  -- element i: the parsed result of a try that exited 0, not timed out
    v_errors text[];   -- element i: why that result fails the try instead
BEGIN
    IF coalesce(cardinality(p_try_numbers), 0) <> v_n OR coalesce(cardinality(p_exit_codes), 0) <> v_n
       OR (cardinality(p_timed_outs) IS NOT NULL AND cardinality(p_timed_outs) <> v_n)
       OR (cardinality(p_reasons) IS NOT NULL AND cardinality(p_reasons) <> v_n)
       OR (cardinality(p_results) IS NOT NULL AND cardinality(p_results) <> v_n) THEN
        RAISE EXCEPTION 'finish_tis_v2: the arrays describe % tries but have different lengths; send one element '
                        'per try in each', v_n;
    END IF;

    -- Results are checked one by one (a cast that fails needs its own exception block); only
    -- elements that carry one and exited 0 in time are looked at (BashTasks carry none).
    FOR i IN 1 .. coalesce(cardinality(p_results), 0) LOOP
        CONTINUE WHEN p_results[i] IS NULL OR coalesce(p_timed_outs[i], false) OR p_exit_codes[i] IS DISTINCT FROM 0;
        IF octet_length(p_results[i]) > p_max_bytes THEN
            v_errors[i] := format('the task''s result is %s bytes, more than max_result_bytes (%s); return less, '
                                  'or store big data elsewhere and return its location',
                                  octet_length(p_results[i]), p_max_bytes);
        ELSE
            BEGIN
                v_values[i] := p_results[i]::jsonb;
            EXCEPTION WHEN OTHERS THEN
                v_errors[i] := left('the task''s result is not plain JSON (' || regexp_replace(SQLERRM, '\s+', ' ', 'g')
                                    || '); return dicts, lists, strings, finite numbers, booleans or None', 4000);
            END;
        END IF;
    END LOOP;

    RETURN QUERY
    WITH r AS (  -- the reports
        SELECT i AS n, p_ti_ids[i] AS id, p_try_numbers[i] AS try, p_exit_codes[i] AS code,
               coalesce(p_timed_outs[i], false) AS timed, p_reasons[i] AS reason,
               v_values[i] AS value, v_errors[i] AS error
        FROM generate_subscripts(p_ti_ids, 1) AS i
    ),
    locked AS MATERIALIZED (  -- LOCK: the reported TIs, in id order (LockRows above the sort)
        SELECT ti.id, ti.state, ti.try_number, ti.max_tries, ti.dag_id, ti.run_id, ti.task_id, ti.map_index,
               ti.pool, ti.pool_slots, ti.queued_at, ti.start_date, ti.hostname, ti.worker_job_id, ti.log_path
        FROM task_instance ti
        WHERE ti.id = ANY (p_ti_ids)
        ORDER BY ti.id
        FOR UPDATE OF ti
    ),
    w AS (  -- the report that ends each running try: the first one naming it
        SELECT DISTINCT ON (l.id) r.n, r.timed, r.value, l.*,
               CASE WHEN r.error IS NOT NULL THEN 1 ELSE r.code END AS exit,
               CASE WHEN r.timed THEN 'execution_timeout exceeded'
                    ELSE coalesce(r.error, left(r.reason, 4000)) END AS reason,
               t.retry_delay, t.retry_exponential_backoff, t.max_retry_delay
        FROM r
        JOIN locked l ON l.id = r.id AND l.state = 'running' AND l.try_number = r.try
        LEFT JOIN task t ON t.dag_id = l.dag_id AND t.task_id = l.task_id
        ORDER BY l.id, r.n
    ),
    d AS (  -- the new state of each ended try (finish_ti_v3's rules)
        SELECT w.*,
               CASE WHEN NOT w.timed AND w.exit = 0 THEN 'success'
                    WHEN NOT w.timed AND w.exit = 99 THEN 'skipped'
                    WHEN w.try_number <= w.max_tries THEN 'up_for_retry'
                    ELSE 'failed' END AS new_state,
               -- least() and greatest() rank NaN above every number: NaN and +Infinity become c_max_s.
               CASE WHEN coalesce(w.retry_exponential_backoff, false)
                    THEN least(least(greatest(coalesce(w.retry_delay, 300), 0), c_max_s)
                               * power(2::double precision, greatest(least(w.try_number, 65), 1) - 1),
                               greatest(coalesce(w.max_retry_delay, 86400), 0), c_max_s)
                    ELSE least(greatest(coalesce(w.retry_delay, 300), 0), c_max_s) END AS delay
        FROM w
    ),
    upd AS (
        UPDATE task_instance ti
        SET state = d.new_state,
            end_date = v_now,
            exit_code = d.exit,
            retry_at = CASE WHEN d.new_state = 'up_for_retry' THEN v_now + make_interval(secs => d.delay) END,
            state_reason = d.reason,
            updated_at = v_now
        FROM d
        WHERE ti.id = d.id
    ),
    hist AS (
        INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                           pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                           worker_job_id, log_path, reason)
        SELECT d.id, d.dag_id, d.run_id, d.task_id, d.map_index, d.try_number,
               CASE WHEN d.new_state = 'up_for_retry' THEN 'failed' ELSE d.new_state END,
               d.pool, d.pool_slots, d.queued_at, d.start_date, v_now, d.exit, d.hostname,
               d.worker_job_id, d.log_path, d.reason
        FROM d
        ORDER BY d.id
    ),
    kept AS (  -- a success with a result replaces what an earlier try left
        INSERT INTO task_result (ti_id, try_number, value, created_at)
        SELECT d.id, d.try_number, d.value, v_now
        FROM d
        WHERE d.new_state = 'success' AND d.value IS NOT NULL
        ORDER BY d.id
        ON CONFLICT (ti_id) DO UPDATE SET try_number = excluded.try_number, value = excluded.value,
                                          created_at = excluded.created_at
    ),
    dropped AS (  -- any other ended try leaves no result behind
        DELETE FROM task_result x
        USING d
        WHERE x.ti_id = d.id AND NOT (d.new_state = 'success' AND d.value IS NOT NULL)
    )
    SELECT r.id, r.try, d.new_state::text
    FROM r
    LEFT JOIN d ON d.n = r.n
    ORDER BY r.id, r.n;
END;
$$;
