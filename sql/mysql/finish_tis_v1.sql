-- finish_tis_v1(ti_ids, try_numbers, exit_codes, timed_outs, reasons, results, now, max_bytes):
-- a worker reports how many tries ended in one call: element i of each array describes one try
-- (its TI id, try number, exit code, whether it timed out, the reason or NULL, the result as
-- JSON text or NULL). Each try ends exactly as one finish_ti_v3 call with those values would end
-- it (success / skipped / up_for_retry / failed, the history row, task_result, retry_at): this
-- procedure calls finish_ti_v3 for each element, so their meaning cannot drift apart. p_max_bytes
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
-- MySQL: a PROCEDURE whose final SELECT returns the rows; the arrays are JSON arrays
-- (engine.db.run sends lists as JSON), each read once with JSON_TABLE into a session temporary
-- table (as fire_triggers_v1 does); timed_outs are JSON booleans (or 0/1).
CREATE PROCEDURE finish_tis_v1(IN p_ti_ids LONGTEXT, IN p_try_numbers LONGTEXT, IN p_exit_codes LONGTEXT,
                               IN p_timed_outs LONGTEXT, IN p_reasons LONGTEXT, IN p_results LONGTEXT,
                               IN p_now DATETIME(6), IN p_max_bytes INT)
BEGIN
    DECLARE v_now    DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_n      INT DEFAULT COALESCE(JSON_LENGTH(p_ti_ids), 0);
    DECLARE v_done   BOOLEAN DEFAULT FALSE;
    DECLARE v_i      INT;
    DECLARE v_id     BIGINT;
    DECLARE v_try    INT;
    DECLARE v_code   INT;
    DECLARE v_timed  BOOLEAN;
    DECLARE v_reason LONGTEXT;
    DECLARE v_result LONGTEXT;
    DECLARE c_tries CURSOR FOR
        SELECT i.n, i.id, i.try, i.code, i.timed, i.reason, i.result FROM finish_tis_v1_in i ORDER BY i.id, i.n;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    IF COALESCE(JSON_LENGTH(p_try_numbers), 0) <> v_n OR COALESCE(JSON_LENGTH(p_exit_codes), 0) <> v_n
       OR COALESCE(JSON_LENGTH(p_timed_outs), v_n) <> v_n OR COALESCE(JSON_LENGTH(p_reasons), v_n) <> v_n
       OR COALESCE(JSON_LENGTH(p_results), v_n) <> v_n THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'finish_tis_v1: the arrays have different lengths; send one element per try in each';
    END IF;
    CREATE TEMPORARY TABLE IF NOT EXISTS finish_tis_v1_in (
        n INT PRIMARY KEY, id BIGINT NOT NULL, try INT, code INT, timed BOOLEAN, reason LONGTEXT,
        result LONGTEXT, state VARCHAR(20));
    DELETE FROM finish_tis_v1_in;

    -- Each array is read once (a JSON_TABLE joined to another would be read once per row).
    INSERT INTO finish_tis_v1_in (n, id)
    SELECT a.n, a.id FROM JSON_TABLE(p_ti_ids, '$[*]' COLUMNS (n FOR ORDINALITY, id BIGINT PATH '$')) a;
    UPDATE finish_tis_v1_in i
    JOIN JSON_TABLE(p_try_numbers, '$[*]' COLUMNS (n FOR ORDINALITY, v INT PATH '$')) a ON a.n = i.n
    SET i.try = a.v;
    UPDATE finish_tis_v1_in i
    JOIN JSON_TABLE(p_exit_codes, '$[*]' COLUMNS (n FOR ORDINALITY, v INT PATH '$')) a ON a.n = i.n
    SET i.code = a.v;
    UPDATE finish_tis_v1_in i
    JOIN JSON_TABLE(COALESCE(p_timed_outs, '[]'), '$[*]' COLUMNS (n FOR ORDINALITY, v VARCHAR(10) PATH '$')) a
      ON a.n = i.n
    SET i.timed = a.v IN ('true', '1');
    UPDATE finish_tis_v1_in i
    JOIN JSON_TABLE(COALESCE(p_reasons, '[]'), '$[*]' COLUMNS (n FOR ORDINALITY, v LONGTEXT PATH '$')) a ON a.n = i.n
    SET i.reason = a.v;
    UPDATE finish_tis_v1_in i
    JOIN JSON_TABLE(COALESCE(p_results, '[]'), '$[*]' COLUMNS (n FOR ORDINALITY, v LONGTEXT PATH '$')) a ON a.n = i.n
    SET i.result = a.v;

    OPEN c_tries;
    finishing: LOOP
        FETCH c_tries INTO v_i, v_id, v_try, v_code, v_timed, v_reason, v_result;
        IF v_done THEN
            LEAVE finishing;
        END IF;
        UPDATE finish_tis_v1_in i
        SET i.state = finish_ti_v3(v_id, v_try, v_code, COALESCE(v_timed, FALSE), v_reason, v_now, v_result,
                                   p_max_bytes)
        WHERE i.n = v_i;
    END LOOP;
    CLOSE c_tries;

    SELECT i.id AS ti_id, i.try AS try_number, i.state FROM finish_tis_v1_in i ORDER BY i.id, i.n;
END
