-- finish_ti_v3(ti_id, try_number, exit_code, timed_out, reason, now, result, max_bytes):
-- finish_ti_v2 (below) plus the try's result. `result` is JSON text (a PythonTask's return value, or a final
-- trigger event's payload: fire_triggers_v1); on `success` it is stored in task_result in the
-- same transaction as the state, replacing what an earlier try of the TI left there. Text that
-- is not valid JSON (NaN, Infinity, a raw control character, not JSON at all) fails the try instead, with the
-- reason "the task's result is not plain JSON (...)" (retried if retries remain); so does a
-- result of more than p_max_bytes bytes (NULL: no limit here; the worker checks the setting
-- max_result_bytes before it reports). Any try that does not end in success removes the TI's
-- stored result: a downstream task never reads the value of a try that did not succeed.
--
-- As finish_ti_v2: a worker reports how a try ended (fire_triggers_v1 reports for a try a
-- final trigger event ends); the database decides what it means and returns the new state (NULL when the report is stale:
-- the TI is no longer running that try, e.g. it was reset as an orphan).
--   exit 0                 -> success
--   exit 99 (not timed out)-> skipped (Airflow's skip_on_exit_code; PythonTask raises SkipTask)
--   otherwise              -> up_for_retry while try_number <= max_tries, with retry_at =
--                             now + delay, else failed. delay = retry_delay, or with
--                             exponential backoff retry_delay * 2^(try_number - 1) capped by
--                             max_retry_delay (default one day).
-- The pool slot is released by the state change itself (usage counts queued/running/deferred).
--
-- New in v2: no value of the task row can make it fail. The delay is clamped into
-- [0, 3,153,600,000 s] (engine/validate.py MAX_SECONDS, 100 years: now + delay fits every
-- timestamp of both dialects); the backoff exponent is capped at 64 (2^64 times any clamped
-- delay is a finite double); a missing task row means the column defaults (retry_delay 300 s,
-- no backoff) instead of a try that can never end. Any reason text is accepted: NUL
-- characters are removed and it is cut to 4,000 characters.
--
-- Lock: the task_instance row, FOR UPDATE, for the compare-and-set on (state, try_number); the
-- TI's task_result row (written or deleted) after it.
-- Invariant: one history row per finished try; a late or repeated report changes nothing;
-- a task_result row belongs to a TI in state success (until the TI is cleared or re-run);
-- retry_at of an up_for_retry TI is within now + MAX_SECONDS.
-- Callers may assume: it raises for no value stored in task or task_instance.
-- MySQL: a FUNCTION that modifies data (see heartbeat_v1 about binary logging). The task row
-- is read without a lock (MariaDB has no FOR UPDATE OF: a join would lock it too, and every
-- worker finishing a TI of the same task would queue behind it). The reason is a LONGTEXT
-- parameter: a TEXT one would refuse a reason longer than 65,535 bytes before the body runs.
-- The result is LONGTEXT too, checked with JSON_VALID (a JSON parameter would refuse bad JSON
-- before the body runs); an existing result row is deleted only when there is one (a DELETE
-- of a missing key would take a gap lock that other finishing workers queue behind).
CREATE FUNCTION finish_ti_v3(p_ti_id BIGINT, p_try_number INT, p_exit_code INT, p_timed_out BOOLEAN,
                             p_reason LONGTEXT, p_now DATETIME(6), p_result LONGTEXT, p_max_bytes INT)
RETURNS VARCHAR(20)
NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    DECLARE c_max_s     DOUBLE DEFAULT 3153600000;  -- engine/validate.py MAX_SECONDS
    DECLARE v_now       DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_state     VARCHAR(20);
    DECLARE v_delay     DOUBLE;
    DECLARE v_cur_state VARCHAR(20);
    DECLARE v_try       INT;
    DECLARE v_max_tries INT;
    DECLARE v_found     INT;
    DECLARE v_dag_id    VARCHAR(250);
    DECLARE v_task_id   VARCHAR(250);
    DECLARE v_retry_delay DOUBLE;
    DECLARE v_backoff   BOOLEAN;
    DECLARE v_max_delay DOUBLE;
    DECLARE v_reason    TEXT;
    DECLARE v_exit      INT DEFAULT p_exit_code;
    DECLARE v_bad       TEXT;
    DECLARE v_has       INT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_cur_state = NULL;
    SET p_timed_out = COALESCE(p_timed_out, FALSE);  -- PostgreSQL: DEFAULT false

    SELECT ti.state, ti.try_number, ti.max_tries, ti.dag_id, ti.task_id
    INTO v_cur_state, v_try, v_max_tries, v_dag_id, v_task_id
    FROM task_instance ti WHERE ti.id = p_ti_id
    FOR UPDATE;
    IF v_cur_state IS NULL OR v_cur_state <> 'running' OR v_try <> p_try_number THEN
        RETURN NULL;
    END IF;
    -- An aggregate: always one row, NULLs when the task row is gone.
    SELECT COUNT(*), MAX(t.retry_delay), MAX(t.retry_exponential_backoff), MAX(t.max_retry_delay)
    INTO v_found, v_retry_delay, v_backoff, v_max_delay
    FROM task t WHERE t.dag_id = v_dag_id AND t.task_id = v_task_id;

    IF NOT p_timed_out AND p_exit_code = 0 AND p_result IS NOT NULL THEN
        IF LENGTH(p_result) > p_max_bytes THEN
            SET v_exit = 1;
            SET v_bad = CONCAT('the task''s result is ', LENGTH(p_result), ' bytes, more than max_result_bytes (',
                               p_max_bytes, '); return less, or store big data elsewhere and return its location');
        ELSEIF NOT JSON_VALID(p_result) THEN
            SET v_exit = 1;
            SET v_bad = 'the task''s result is not plain JSON; return dicts, lists, strings, finite numbers, booleans or None';
        END IF;
    END IF;

    IF NOT p_timed_out AND v_exit = 0 THEN
        SET v_state = 'success';
    ELSEIF NOT p_timed_out AND v_exit = 99 THEN
        SET v_state = 'skipped';
    ELSEIF v_try <= v_max_tries THEN
        SET v_state = 'up_for_retry';
        SET v_delay = LEAST(GREATEST(COALESCE(v_retry_delay, 300), 0), c_max_s);
        IF COALESCE(v_backoff, FALSE) THEN
            SET v_delay = LEAST(v_delay * POW(2, GREATEST(LEAST(v_try, 65), 1) - 1),
                                GREATEST(COALESCE(v_max_delay, 86400), 0), c_max_s);
        END IF;
    ELSE
        SET v_state = 'failed';
    END IF;
    SET v_reason = CASE WHEN p_timed_out THEN 'execution_timeout exceeded'
                        ELSE LEFT(REPLACE(COALESCE(v_bad, p_reason), CHAR(0 USING utf8mb4), ''), 4000) END;

    -- History first: every column it copies is one the UPDATE below leaves alone.
    INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                       pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                       worker_job_id, log_path, reason)
    SELECT ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number,
           CASE WHEN v_state = 'up_for_retry' THEN 'failed' ELSE v_state END,
           ti.pool, ti.pool_slots, ti.queued_at, ti.start_date, v_now, v_exit, ti.hostname,
           ti.worker_job_id, ti.log_path, v_reason
    FROM task_instance ti WHERE ti.id = p_ti_id;

    -- No INTERVAL with a fractional SECOND (MySQL rounds it): microseconds.
    UPDATE task_instance ti
    SET ti.state = v_state,
        ti.end_date = v_now,
        ti.exit_code = v_exit,
        ti.retry_at = CASE WHEN v_state = 'up_for_retry'
                           THEN v_now + INTERVAL ROUND(v_delay * 1000000) MICROSECOND END,
        ti.state_reason = v_reason,
        ti.updated_at = v_now
    WHERE ti.id = p_ti_id;

    IF v_state = 'success' AND p_result IS NOT NULL THEN
        INSERT INTO task_result (ti_id, try_number, value, created_at)
        VALUES (p_ti_id, v_try, p_result, v_now)
        ON DUPLICATE KEY UPDATE try_number = VALUES(try_number), value = VALUES(value), created_at = VALUES(created_at);
    ELSE
        SELECT COUNT(*) INTO v_has FROM task_result r WHERE r.ti_id = p_ti_id;
        IF v_has > 0 THEN
            DELETE FROM task_result WHERE ti_id = p_ti_id;
        END IF;
    END IF;
    RETURN v_state;
END
