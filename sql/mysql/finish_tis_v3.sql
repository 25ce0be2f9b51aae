-- finish_tis_v3(ti_ids, try_numbers, exit_codes, timed_outs, reasons, results, now, max_bytes):
-- finish_tis_v1 (read sql/mysql/finish_tis_v1.sql: the same arguments, result, meaning and lock
-- order), decided for the whole batch at once instead of one finish_ti_v3 call per try, as
-- PostgreSQL's finish_tis_v2 does.
--
-- New in v3: v1 ran finish_ti_v3 for each try (its lock, task read, history INSERT, UPDATE and
-- task_result write: ~7 statements a try, plus the call). v3 locks the reported TIs with one
-- locking cursor in id order, then decides and writes the batch with a fixed number of
-- statements: the decisions into a temporary table (one INSERT ... SELECT), the history (one
-- INSERT ... SELECT), the TIs (one UPDATE ... JOIN), the results (one upsert, one DELETE ... JOIN).
-- The rules are finish_ti_v3's, written once more in SQL below; tests/test_finish_tis.py
-- (test_the_named_version_decides_every_batch_as_v1_does) applies random batches (stale,
-- duplicate and late reports, NULL elements, results that are not JSON or too big, retries and
-- backoff) through v1 and through the named query and compares every row they leave.
--
-- As finish_tis_v1: element i of each array describes one ended try (TI id, try number, exit
-- code, timed out, reason or NULL, result as JSON text or NULL). Each try ends as finish_ti_v3
-- ends it:
--   exit 0                  -> success (its result, if any, stored in task_result)
--   exit 99 (not timed out) -> skipped
--   otherwise               -> up_for_retry while try_number <= max_tries (retry_at = now + delay;
--                              delay = retry_delay, or with exponential backoff retry_delay *
--                              2^(try_number - 1) capped by max_retry_delay (default one day),
--                              clamped into [0, 3,153,600,000 s]), else failed.
-- A result that is not valid JSON, or longer than p_max_bytes bytes, fails the try instead (exit
-- 1, the reason says why). Any try that does not end in success removes the TI's stored result.
-- Returns one row (ti_id, try_number, state) per element, in TI id order (then element order):
-- the new state, or NULL when that report is stale (the TI is not running that try). When one
-- batch holds several reports of one running try, the first of them (in element order) ends it
-- and the others are stale, exactly as v1's one-by-one calls decide.
--
-- Lock: every reported task_instance row, FOR UPDATE, by a locking cursor in TI id order (the
-- order of every batch that locks TI rows: fire_triggers_v1, claim_tis; v1 took the same rows in
-- the same order one call at a time), then the task_result rows of the TIs that have one; all
-- held until the caller's transaction ends. Task rows are read without a lock (as finish_ti_v3).
-- Invariant: fenced per try: a report changes a TI only while it is running that very try
-- (state and try_number read under the row lock), so a late or duplicate report never changes a
-- newer try; one history row per finished try.
-- Callers may assume: it raises only when the arrays' lengths differ (nothing is changed then) or
-- for what v1 raises for (a TI id element that is NULL or not a whole number); no value stored in
-- task or task_instance makes it raise.
-- MySQL: a PROCEDURE whose final SELECT returns the rows; the arrays are JSON arrays, each read
-- once with JSON_TABLE into a session temporary table (as v1). A result row is deleted through a
-- join driven by the TIs that have one (read first): a probe of a missing key would take a gap
-- lock under REPEATABLE READ that other finishing workers queue behind (see finish_ti_v3).
CREATE PROCEDURE finish_tis_v3(IN p_ti_ids LONGTEXT, IN p_try_numbers LONGTEXT, IN p_exit_codes LONGTEXT,
                               IN p_timed_outs LONGTEXT, IN p_reasons LONGTEXT, IN p_results LONGTEXT,
                               IN p_now DATETIME(6), IN p_max_bytes INT)
BEGIN
    DECLARE c_max_s DOUBLE DEFAULT 3153600000;  -- engine/validate.py MAX_SECONDS
    DECLARE v_now   DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_n     INT DEFAULT COALESCE(JSON_LENGTH(p_ti_ids), 0);
    DECLARE v_done  BOOLEAN DEFAULT FALSE;
    DECLARE v_id    BIGINT;
    DECLARE v_tmp_engine VARCHAR(64);
    DECLARE c_lock CURSOR FOR
        SELECT ti.id FROM task_instance ti
        WHERE ti.id IN (SELECT i.id FROM finish_tis_v3_in i)
        ORDER BY ti.id
        FOR UPDATE;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    IF COALESCE(JSON_LENGTH(p_try_numbers), 0) <> v_n OR COALESCE(JSON_LENGTH(p_exit_codes), 0) <> v_n
       OR COALESCE(JSON_LENGTH(p_timed_outs), v_n) <> v_n OR COALESCE(JSON_LENGTH(p_reasons), v_n) <> v_n
       OR COALESCE(JSON_LENGTH(p_results), v_n) <> v_n THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'finish_tis_v3: the arrays have different lengths; send one element per try in each';
    END IF;
    -- Session-local scratch tables, created once per connection, emptied here. Aria on MariaDB
    -- (InnoDB on MySQL, which has no Aria), as queue_tis_v17's: they are private to the session and
    -- emptied at every call, so they need no undo (a 64-try report: 8-10 ms against 12 ms with
    -- InnoDB ones, on a loaded machine). The session's engine for temporary tables is switched for
    -- these two statements only.
    SET v_tmp_engine = @@session.default_tmp_storage_engine;
    IF VERSION() LIKE '%MariaDB%' THEN
        SET SESSION default_tmp_storage_engine = 'Aria';
    END IF;
    CREATE TEMPORARY TABLE IF NOT EXISTS finish_tis_v3_in (
        n INT PRIMARY KEY, id BIGINT NOT NULL, try INT, code INT, timed BOOLEAN, reason LONGTEXT,
        result LONGTEXT, KEY (id));
    -- One row per try this call ends: the element that ends it and what it decides.
    CREATE TEMPORARY TABLE IF NOT EXISTS finish_tis_v3_end (
        n INT PRIMARY KEY, id BIGINT NOT NULL UNIQUE, exit_code INT, state VARCHAR(20), reason TEXT,
        result LONGTEXT, delay DOUBLE, has_result BOOLEAN);
    SET SESSION default_tmp_storage_engine = v_tmp_engine;
    DELETE FROM finish_tis_v3_in;
    DELETE FROM finish_tis_v3_end;

    -- Each array is read once (a JSON_TABLE joined to another would be read once per row).
    INSERT INTO finish_tis_v3_in (n, id)
    SELECT a.n, a.id FROM JSON_TABLE(p_ti_ids, '$[*]' COLUMNS (n FOR ORDINALITY, id BIGINT PATH '$')) a;
    UPDATE finish_tis_v3_in i
    JOIN JSON_TABLE(p_try_numbers, '$[*]' COLUMNS (n FOR ORDINALITY, v INT PATH '$')) a ON a.n = i.n
    SET i.try = a.v;
    UPDATE finish_tis_v3_in i
    JOIN JSON_TABLE(p_exit_codes, '$[*]' COLUMNS (n FOR ORDINALITY, v INT PATH '$')) a ON a.n = i.n
    SET i.code = a.v;
    UPDATE finish_tis_v3_in i
    JOIN JSON_TABLE(COALESCE(p_timed_outs, '[]'), '$[*]' COLUMNS (n FOR ORDINALITY, v VARCHAR(10) PATH '$')) a
      ON a.n = i.n
    SET i.timed = a.v IN ('true', '1');
    UPDATE finish_tis_v3_in i
    JOIN JSON_TABLE(COALESCE(p_reasons, '[]'), '$[*]' COLUMNS (n FOR ORDINALITY, v LONGTEXT PATH '$')) a ON a.n = i.n
    SET i.reason = a.v;
    UPDATE finish_tis_v3_in i
    JOIN JSON_TABLE(COALESCE(p_results, '[]'), '$[*]' COLUMNS (n FOR ORDINALITY, v LONGTEXT PATH '$')) a ON a.n = i.n
    SET i.result = a.v;

    -- LOCK: the reported TIs, in id order.
    OPEN c_lock;
    locking: LOOP
        FETCH c_lock INTO v_id;
        IF v_done THEN
            LEAVE locking;
        END IF;
    END LOOP;
    CLOSE c_lock;

    -- The report that ends each running try (the first, in element order, naming its TI's running
    -- try), and finish_ti_v3's decision for it: the exit code (1 when the result is refused), the
    -- state, the reason, the retry delay. Read under the row locks just taken.
    INSERT INTO finish_tis_v3_end (n, id, exit_code, state, reason, result, delay, has_result)
    SELECT x.n, x.id, x.exit_code,
           CASE WHEN NOT x.timed AND x.exit_code = 0 THEN 'success'
                WHEN NOT x.timed AND x.exit_code = 99 THEN 'skipped'
                WHEN x.try_number <= x.max_tries THEN 'up_for_retry'
                ELSE 'failed' END,
           CASE WHEN x.timed THEN 'execution_timeout exceeded'
                ELSE LEFT(REPLACE(COALESCE(x.bad, x.reason), CHAR(0 USING utf8mb4), ''), 4000) END,
           x.result,
           CASE WHEN COALESCE(x.retry_exponential_backoff, FALSE)
                THEN LEAST(LEAST(GREATEST(COALESCE(x.retry_delay, 300), 0), c_max_s)
                           * POW(2, GREATEST(LEAST(x.try_number, 65), 1) - 1),
                           GREATEST(COALESCE(x.max_retry_delay, 86400), 0), c_max_s)
                ELSE LEAST(GREATEST(COALESCE(x.retry_delay, 300), 0), c_max_s) END,
           EXISTS (SELECT 1 FROM task_result r WHERE r.ti_id = x.id)
    FROM (
        SELECT w.*, CASE WHEN w.bad IS NOT NULL THEN 1 ELSE w.code END AS exit_code
        FROM (
            SELECT i.n, i.id, i.code, COALESCE(i.timed, FALSE) AS timed, i.reason, i.result,
                   ti.try_number, ti.max_tries, t.retry_delay, t.retry_exponential_backoff, t.max_retry_delay,
                   CASE WHEN NOT COALESCE(i.timed, FALSE) AND i.code = 0 AND i.result IS NOT NULL THEN
                       CASE WHEN LENGTH(i.result) > p_max_bytes
                            THEN CONCAT('the task''s result is ', LENGTH(i.result), ' bytes, more than max_result_bytes (',
                                        p_max_bytes, '); return less, or store big data elsewhere and return its location')
                            WHEN NOT JSON_VALID(i.result)
                            THEN 'the task''s result is not plain JSON; return dicts, lists, strings, finite numbers, booleans or None'
                       END
                   END AS bad,
                   ROW_NUMBER() OVER (PARTITION BY i.id ORDER BY i.n) AS nth
            FROM finish_tis_v3_in i
            JOIN task_instance ti ON ti.id = i.id AND ti.state = 'running' AND ti.try_number = i.try
            LEFT JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
        ) w
        WHERE w.nth = 1
    ) x;

    -- History first: every column it copies is one the UPDATE below leaves alone.
    INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                       pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                       worker_job_id, log_path, reason)
    SELECT ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number,
           CASE WHEN e.state = 'up_for_retry' THEN 'failed' ELSE e.state END,
           ti.pool, ti.pool_slots, ti.queued_at, ti.start_date, v_now, e.exit_code, ti.hostname,
           ti.worker_job_id, ti.log_path, e.reason
    FROM finish_tis_v3_end e
    STRAIGHT_JOIN task_instance ti ON ti.id = e.id
    ORDER BY e.id;

    -- No INTERVAL with a fractional SECOND (MySQL rounds it): microseconds.
    UPDATE finish_tis_v3_end e
    STRAIGHT_JOIN task_instance ti ON ti.id = e.id
    SET ti.state = e.state,
        ti.end_date = v_now,
        ti.exit_code = e.exit_code,
        ti.retry_at = CASE WHEN e.state = 'up_for_retry'
                           THEN v_now + INTERVAL ROUND(e.delay * 1000000) MICROSECOND END,
        ti.state_reason = e.reason,
        ti.updated_at = v_now;

    -- A success with a result replaces what an earlier try left; any other ended try leaves none.
    INSERT INTO task_result (ti_id, try_number, value, created_at)
    SELECT ti.id, ti.try_number, e.result, v_now
    FROM finish_tis_v3_end e
    STRAIGHT_JOIN task_instance ti ON ti.id = e.id
    WHERE e.state = 'success' AND e.result IS NOT NULL
    ORDER BY e.id
    ON DUPLICATE KEY UPDATE try_number = VALUES(try_number), value = VALUES(value), created_at = VALUES(created_at);
    DELETE r
    FROM finish_tis_v3_end e
    STRAIGHT_JOIN task_result r ON r.ti_id = e.id
    WHERE e.has_result AND NOT (e.state = 'success' AND e.result IS NOT NULL);

    SELECT i.id AS ti_id, i.try AS try_number, e.state
    FROM finish_tis_v3_in i
    LEFT JOIN finish_tis_v3_end e ON e.n = i.n
    ORDER BY i.id, i.n;
END
