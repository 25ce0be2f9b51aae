-- fire_triggers_v2(trigger_ids, events, errors, finals, now, boost, max_bytes): fire_triggers_v1
-- (read sql/mysql/fire_triggers_v1.sql: the same arguments, result, meaning and lock order), with
-- the tries its triggers end (errors and final events) decided for the whole batch at once
-- instead of one finish_ti_v3 call per try.
--
-- New in v2: v1 ended each such try through finish_ti_v3 (a read of the next TI, the TI set
-- running, finish_ti_v3's lock, task read, history INSERT, UPDATE and task_result write, then the
-- state written back: ~10 statements a try; 1,000 final events in one call took ~4.6x as long as
-- 1,000 resumes). v2 sets them running with one UPDATE, then decides and writes them with a
-- fixed number of statements, as finish_tis_v3 does for a worker's report: the decisions into a
-- temporary table (one INSERT ... SELECT), the history (one INSERT ... SELECT), the TIs (one
-- UPDATE ... JOIN), the results (one upsert, one DELETE ... JOIN). The rules are finish_ti_v3's
-- (written once more in SQL below), with exit code NULL for an error, 0 for a final success (the
-- event as the result; JSON null: none; over max_bytes or not JSON: exit 1 and the reason says
-- why) and 1 for a final failure ("the trigger ended the try as failed: <event>").
-- tests/test_fire_triggers.py applies random batches through v1 and through the named query and
-- compares every row they leave.
--
-- What v1 decides, unchanged:
--   error NULL, final NULL, pool with include_deferred -> `queued` (kept its place in every limit);
--   error NULL, final NULL, other pools -> `scheduled` with priority_weight = task's + boost;
--   error set -> the try fails (up_for_retry while retries remain, else failed);
--   final 'success' -> the try ends as `success` with the event as its result;
--   final 'failed' -> the try fails (exit code 1, retried if retries remain);
--   any other final, or an event that is not plain JSON -> an error fire.
-- Returns (trigger_id, state) in input order: the TI's new state, NULL when the trigger had
-- already fired or its TI no longer waits on it (the trigger is marked fired either way).
--
-- Lock: the batch's trigger rows (the UPDATE that marks them fired), then their TIs' rows (a
-- locking cursor, in id order), then the task_result rows of the ended tries' TIs that have one:
-- always trigger before TI, as fire_trigger_v2, claim_triggers_v2 and v1. All held until the
-- caller's transaction ends.
-- Invariant: a trigger fires once (compare-and-set on fired_at IS NULL), a TI resumes or ends
-- once per deferral (compare-and-set on state 'deferred' and trigger_id, under the row lock); one
-- history row per ended try; no limit's usage grows.
-- Callers may assume: one call costs a fixed number of set-based statements, whatever the batch
-- holds; calling it again for the same triggers is harmless; no event, error or stored value
-- makes it raise.
-- MySQL: a PROCEDURE whose final SELECT returns the rows; the arrays are JSON arrays read with
-- JSON_TABLE into session temporary tables (Aria on MariaDB). A result row is deleted through a
-- join driven by the TIs that have one: a probe of a missing key would take a gap lock under
-- REPEATABLE READ that other finishing workers queue behind (see finish_ti_v3).
CREATE PROCEDURE fire_triggers_v2(IN p_trigger_ids LONGTEXT, IN p_events LONGTEXT, IN p_errors LONGTEXT,
                                  IN p_finals LONGTEXT, IN p_now DATETIME(6), IN p_boost INT, IN p_max_bytes INT)
BEGIN
    DECLARE v_now   DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_done  BOOLEAN DEFAULT FALSE;
    DECLARE c_max_s DOUBLE DEFAULT 3153600000;  -- engine/validate.py MAX_SECONDS
    DECLARE v_id    BIGINT;
    DECLARE v_tmp_engine VARCHAR(64);
    DECLARE c_lock CURSOR FOR
        SELECT ti.id FROM task_instance ti
        WHERE ti.id IN (SELECT i.ti_id FROM fire_triggers_v2_in i WHERE i.fired)
        ORDER BY ti.id
        FOR UPDATE;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    -- Session-local scratch tables, created once per connection and emptied here; Aria on MariaDB
    -- (InnoDB on MySQL, which has no Aria) as finish_tis_v3's: private to the session and emptied at
    -- every call, they need no undo. The session's engine for temporary tables is switched for
    -- these three statements only.
    SET v_tmp_engine = @@session.default_tmp_storage_engine;
    IF VERSION() LIKE '%MariaDB%' THEN
        SET SESSION default_tmp_storage_engine = 'Aria';
    END IF;
    CREATE TEMPORARY TABLE IF NOT EXISTS fire_triggers_v2_in (
        n INT PRIMARY KEY, id BIGINT NOT NULL, event LONGTEXT, error LONGTEXT, final VARCHAR(100),
        fired BOOLEAN NOT NULL DEFAULT FALSE, ti_id BIGINT, state VARCHAR(20), KEY (ti_id));
    CREATE TEMPORARY TABLE IF NOT EXISTS fire_triggers_v2_ti (
        ti_id BIGINT PRIMARY KEY, trigger_id BIGINT NOT NULL, try_number INT, keeps BOOLEAN, priority INT,
        event LONGTEXT, error LONGTEXT, final VARCHAR(100));
    -- One row per try this call ends (an error or a final event), and what it decides.
    CREATE TEMPORARY TABLE IF NOT EXISTS fire_triggers_v2_end (
        ti_id BIGINT PRIMARY KEY, trigger_id BIGINT NOT NULL, try_number INT, exit_code INT, state VARCHAR(20),
        reason TEXT, result LONGTEXT, delay DOUBLE, has_result BOOLEAN);
    SET SESSION default_tmp_storage_engine = v_tmp_engine;
    DELETE FROM fire_triggers_v2_in;
    DELETE FROM fire_triggers_v2_ti;
    DELETE FROM fire_triggers_v2_end;

    -- Each array is read once (a JSON_TABLE joined to another would be read once per row).
    INSERT INTO fire_triggers_v2_in (n, id)
    SELECT a.n, a.id FROM JSON_TABLE(p_trigger_ids, '$[*]' COLUMNS (n FOR ORDINALITY, id BIGINT PATH '$')) a
    WHERE a.id IS NOT NULL;
    INSERT INTO fire_triggers_v2_in (n, id, event)
    SELECT e.n, 0, e.event FROM JSON_TABLE(p_events, '$[*]' COLUMNS (n FOR ORDINALITY, event LONGTEXT PATH '$')) e
    ON DUPLICATE KEY UPDATE event = VALUES(event);
    INSERT INTO fire_triggers_v2_in (n, id, error)
    SELECT r.n, 0, r.error FROM JSON_TABLE(p_errors, '$[*]' COLUMNS (n FOR ORDINALITY, error LONGTEXT PATH '$')) r
    ON DUPLICATE KEY UPDATE error = VALUES(error);
    INSERT INTO fire_triggers_v2_in (n, id, final)
    SELECT f.n, 0, f.final FROM JSON_TABLE(p_finals, '$[*]' COLUMNS (n FOR ORDINALITY, final VARCHAR(100) PATH '$')) f
    ON DUPLICATE KEY UPDATE final = VALUES(final);
    DELETE FROM fire_triggers_v2_in WHERE id = 0;  -- an element beyond the ids
    UPDATE fire_triggers_v2_in i
    SET i.error = CONCAT(COALESCE(CONCAT(i.error, '; '), ''), 'the trigger''s event is not plain JSON'), i.event = NULL
    WHERE i.event IS NOT NULL AND NOT JSON_VALID(i.event);
    UPDATE fire_triggers_v2_in i
    SET i.error = CONCAT(COALESCE(CONCAT(i.error, '; '), ''), 'unknown final state ''', LEFT(i.final, 100),
                         '''; use success or failed'), i.final = NULL
    WHERE i.final IS NOT NULL AND i.final NOT IN ('success', 'failed');
    UPDATE fire_triggers_v2_in i SET i.error = LEFT(REPLACE(i.error, CHAR(0 USING utf8mb4), ''), 4000)
    WHERE i.error IS NOT NULL;

    -- The triggers not fired yet: locked and marked fired in one statement.
    UPDATE fire_triggers_v2_in i STRAIGHT_JOIN `trigger` g ON g.id = i.id
    SET g.fired_at = v_now, g.event = i.event, g.error = i.error, i.fired = TRUE, i.ti_id = g.ti_id
    WHERE g.fired_at IS NULL;

    -- Their TIs, locked in id order; then what the decisions need, read without locks.
    OPEN c_lock;
    locking: LOOP
        FETCH c_lock INTO v_id;
        IF v_done THEN
            LEAVE locking;
        END IF;
    END LOOP;
    CLOSE c_lock;
    INSERT INTO fire_triggers_v2_ti (ti_id, trigger_id, try_number, keeps, priority, event, error, final)
    SELECT ti.id, i.id, ti.try_number, COALESCE(p.include_deferred, FALSE),
           GREATEST(LEAST(COALESCE(t.priority_weight, ti.priority_weight) + COALESCE(p_boost, 0), 2147483647),
                    -2147483648),
           i.event, i.error, i.final
    FROM fire_triggers_v2_in i
    JOIN task_instance ti ON ti.id = i.ti_id
    LEFT JOIN pool p ON p.name = ti.pool
    LEFT JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
    WHERE i.fired AND ti.state = 'deferred' AND ti.trigger_id = i.id;

    -- Resumes, set-based: one UPDATE driven by the temporary table (its rows are locked above).
    UPDATE fire_triggers_v2_ti x STRAIGHT_JOIN task_instance ti ON ti.id = x.ti_id
    SET ti.state = CASE WHEN x.keeps THEN 'queued' ELSE 'scheduled' END,
        ti.queued_at = CASE WHEN x.keeps THEN v_now END,
        ti.queued_by_job_id = NULL, ti.updated_at = v_now,
        ti.priority_weight = CASE WHEN x.keeps THEN ti.priority_weight ELSE x.priority END,
        ti.state_reason = CASE WHEN x.keeps THEN 'resumed: trigger fired; kept its slot'
                               ELSE CONCAT('resumed: trigger fired; waits for a slot with priority boost ',
                                           COALESCE(p_boost, 0)) END
    WHERE x.error IS NULL AND x.final IS NULL AND ti.state = 'deferred';
    UPDATE fire_triggers_v2_in i STRAIGHT_JOIN fire_triggers_v2_ti x ON x.ti_id = i.ti_id AND x.trigger_id = i.id
    SET i.state = CASE WHEN x.keeps THEN 'queued' ELSE 'scheduled' END
    WHERE x.error IS NULL AND x.final IS NULL;

    -- Errors and final events: the tries end as finish_ti_v3 would end each (running again first,
    -- then exit code NULL for an error, 0 for a final success with the event as its result, 1 for a
    -- final failure), decided for the whole set at once: one INSERT ... SELECT of the decisions,
    -- then one statement each for history, TIs, results written and results removed. Their TI rows
    -- are locked above; task rows are read without a lock (as finish_ti_v3).
    UPDATE fire_triggers_v2_ti x STRAIGHT_JOIN task_instance ti ON ti.id = x.ti_id
    SET ti.state = 'running', ti.next_method = NULL, ti.next_kwargs = NULL
    WHERE x.error IS NOT NULL OR x.final IS NOT NULL;
    INSERT INTO fire_triggers_v2_end (ti_id, trigger_id, try_number, exit_code, state, reason, result, delay,
                                      has_result)
    SELECT y.ti_id, y.trigger_id, y.try_number, y.exit_code,
           CASE WHEN y.exit_code = 0 THEN 'success'
                WHEN y.try_number <= y.max_tries THEN 'up_for_retry'
                ELSE 'failed' END,
           LEFT(REPLACE(COALESCE(y.bad, y.reason), CHAR(0 USING utf8mb4), ''), 4000),
           y.result,
           CASE WHEN COALESCE(y.retry_exponential_backoff, FALSE)
                THEN LEAST(LEAST(GREATEST(COALESCE(y.retry_delay, 300), 0), c_max_s)
                           * POW(2, GREATEST(LEAST(y.try_number, 65), 1) - 1),
                           GREATEST(COALESCE(y.max_retry_delay, 86400), 0), c_max_s)
                ELSE LEAST(GREATEST(COALESCE(y.retry_delay, 300), 0), c_max_s) END,
           EXISTS (SELECT 1 FROM task_result r WHERE r.ti_id = y.ti_id)
    FROM (
        SELECT w.*, CASE WHEN w.bad IS NOT NULL THEN 1 ELSE w.code END AS exit_code
        FROM (
            SELECT v.*,
                   CASE WHEN v.code = 0 AND v.result IS NOT NULL THEN
                       CASE WHEN LENGTH(v.result) > p_max_bytes
                            THEN CONCAT('the task''s result is ', LENGTH(v.result), ' bytes, more than max_result_bytes (',
                                        p_max_bytes, '); return less, or store big data elsewhere and return its location')
                            WHEN NOT JSON_VALID(v.result)
                            THEN 'the task''s result is not plain JSON; return dicts, lists, strings, finite numbers, booleans or None'
                       END
                   END AS bad
            FROM (
                SELECT x.ti_id, x.trigger_id, x.try_number, ti.max_tries,
                       t.retry_delay, t.retry_exponential_backoff, t.max_retry_delay,
                       CASE WHEN x.error IS NOT NULL THEN NULL WHEN x.final = 'success' THEN 0 ELSE 1 END AS code,
                       CASE WHEN x.error IS NOT NULL THEN x.error
                            WHEN x.final = 'success' THEN NULL
                            ELSE LEFT(CONCAT('the trigger ended the try as failed: ', COALESCE(x.event, 'null')), 4000)
                       END AS reason,
                       CASE WHEN x.error IS NULL AND x.final = 'success' AND COALESCE(JSON_TYPE(x.event), '') <> 'NULL'
                            THEN x.event END AS result
                FROM fire_triggers_v2_ti x
                STRAIGHT_JOIN task_instance ti ON ti.id = x.ti_id
                LEFT JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
                WHERE x.error IS NOT NULL OR x.final IS NOT NULL
            ) v
        ) w
    ) y;

    -- History first: every column it copies is one the UPDATE below leaves alone.
    INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                       pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                       worker_job_id, log_path, reason)
    SELECT ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number,
           CASE WHEN e.state = 'up_for_retry' THEN 'failed' ELSE e.state END,
           ti.pool, ti.pool_slots, ti.queued_at, ti.start_date, v_now, e.exit_code, ti.hostname,
           ti.worker_job_id, ti.log_path, e.reason
    FROM fire_triggers_v2_end e
    STRAIGHT_JOIN task_instance ti ON ti.id = e.ti_id
    ORDER BY e.ti_id;

    -- No INTERVAL with a fractional SECOND (MySQL rounds it): microseconds.
    UPDATE fire_triggers_v2_end e
    STRAIGHT_JOIN task_instance ti ON ti.id = e.ti_id
    SET ti.state = e.state,
        ti.end_date = v_now,
        ti.exit_code = e.exit_code,
        ti.retry_at = CASE WHEN e.state = 'up_for_retry'
                           THEN v_now + INTERVAL ROUND(e.delay * 1000000) MICROSECOND END,
        ti.state_reason = e.reason,
        ti.updated_at = v_now;

    -- A final success with a result replaces what an earlier try left; any other ended try leaves
    -- none (the DELETE is driven by the TIs that have a result: no gap lock on a missing key).
    INSERT INTO task_result (ti_id, try_number, value, created_at)
    SELECT e.ti_id, e.try_number, e.result, v_now
    FROM fire_triggers_v2_end e
    WHERE e.state = 'success' AND e.result IS NOT NULL
    ORDER BY e.ti_id
    ON DUPLICATE KEY UPDATE try_number = VALUES(try_number), value = VALUES(value), created_at = VALUES(created_at);
    DELETE r
    FROM fire_triggers_v2_end e
    STRAIGHT_JOIN task_result r ON r.ti_id = e.ti_id
    WHERE e.has_result AND NOT (e.state = 'success' AND e.result IS NOT NULL);

    UPDATE fire_triggers_v2_in i STRAIGHT_JOIN fire_triggers_v2_end e ON e.ti_id = i.ti_id AND e.trigger_id = i.id
    SET i.state = e.state;

    SELECT i.id AS trigger_id, i.state FROM fire_triggers_v2_in i ORDER BY i.n;
END
