-- claim_triggers_v2(job_id, limit, threshold_s, now): one pass of a triggerer (job `job_id`).
--   1. Timeouts: every waiting trigger whose timeout_at has passed (database clock), whoever
--      runs it, fires with an error through fire_trigger_v2: its TI's try fails (retried if
--      retries remain).
--   2. Dead triggerers: triggerer jobs still `running` whose heartbeat is older than
--      threshold_s become `failed` (as reset_orphans_v2 does for every kind of job), so a
--      triggerer that stalled learns it from heartbeat_v1 and drops what it ran.
--   3. Claim: up to `limit` waiting triggers (fired_at NULL) whose TI still waits on them and
--      that nobody alive runs (triggerer_job_id NULL, or a job that is not running or whose
--      heartbeat is older than threshold_s) become the caller's. Triggers of a triggerer that
--      died are taken over this way. Triggers whose TI no longer waits on them are closed
--      (fired_at set, error says why) instead.
-- Returns the triggers claimed now: (trigger_id, classpath, kwargs, created_at, fileloc of
-- the DAG, for importing user triggers). What the caller already ran is not returned again:
-- it reads its own (query owned_triggers) to drop triggers that fired elsewhere or were taken.
--
-- Lock: the trigger rows, FOR UPDATE SKIP LOCKED: triggerers never wait for each other nor
-- take the same trigger at once. Timeouts take trigger then TI rows, like fire_trigger_v2.
-- Invariant: a trigger has at most one live owner; a trigger fires at most once
-- (fire_trigger_v2 is a compare-and-set), so a takeover can run a trigger twice but never
-- resume its TI twice.
-- Callers may assume: no value stored in a trigger, TI or task makes it raise. Call it inside a
-- transaction (the engine's connections have autocommit off): the savepoints need one.
--
-- New in v2: timeouts fire through fire_trigger_v2 (whose failure path, finish_ti_v2, clamps
-- the retry delay), each after its own SAVEPOINT: one that still fails is rolled back and
-- recorded against its TI (state_reason; the trigger stays waiting and is tried again next
-- pass) and its DAG (dag.error_step = 'claim_triggers', error = one line naming the trigger and
-- TI, error_at = now), and the other triggers go on. A DAG's claim_triggers error is cleared
-- when a timeout of that DAG next fires. threshold_s is clamped into [0, 3,153,600,000 s]
-- (engine/validate.py MAX_SECONDS).
--
-- MySQL: a PROCEDURE whose final SELECT returns the claimed rows. The locking cursors read
-- `trigger` alone and look at task_instance and job in subqueries, which a locking read does
-- not lock (see reset_orphans_v2). No UPDATE ... RETURNING: the claimed ids go through a
-- session temporary table, like claim_tis_v2. SKIP LOCKED relies on READ COMMITTED. PostgreSQL's
-- BEGIN ... EXCEPTION is a block with an EXIT HANDLER FOR SQLEXCEPTION and a SAVEPOINT; the
-- DAGs that failed in this call are kept in a session temporary table.
CREATE PROCEDURE claim_triggers_v2(IN p_job_id BIGINT, IN p_limit INT, IN p_threshold_s DOUBLE, IN p_now DATETIME(6))
BEGIN
    DECLARE v_now    DATETIME(6);
    DECLARE v_cutoff DATETIME(6);
    DECLARE v_done   BOOLEAN DEFAULT FALSE;
    DECLARE v_id     BIGINT;
    DECLARE v_secs   DOUBLE;
    DECLARE v_state  VARCHAR(20);
    DECLARE v_ti     BIGINT;
    DECLARE v_dag_id VARCHAR(250);
    DECLARE v_msg    TEXT;
    DECLARE v_errno  INT;
    DECLARE c_timeouts CURSOR FOR
        SELECT g.id, g.ti_id, TIMESTAMPDIFF(MICROSECOND, g.created_at, g.timeout_at) / 1000000
        FROM `trigger` g
        WHERE g.fired_at IS NULL AND g.timeout_at <= v_now
        ORDER BY g.id
        FOR UPDATE SKIP LOCKED;
    DECLARE c_orphans CURSOR FOR
        SELECT g.id FROM `trigger` g
        WHERE g.fired_at IS NULL
          AND NOT EXISTS (SELECT 1 FROM task_instance ti
                          WHERE ti.id = g.ti_id AND ti.state = 'deferred' AND ti.trigger_id = g.id)
          AND (g.triggerer_job_id IS NULL
               OR NOT EXISTS (SELECT 1 FROM job j WHERE j.id = g.triggerer_job_id AND j.state = 'running'
                                                    AND j.latest_heartbeat >= v_cutoff))
        FOR UPDATE SKIP LOCKED;
    DECLARE c_claim CURSOR FOR
        SELECT g.id FROM `trigger` g
        WHERE g.fired_at IS NULL
          AND (g.triggerer_job_id IS NULL
               OR NOT EXISTS (SELECT 1 FROM job j WHERE j.id = g.triggerer_job_id AND j.state = 'running'
                                                    AND j.latest_heartbeat >= v_cutoff))
        ORDER BY g.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET v_cutoff = v_now - INTERVAL ROUND(LEAST(GREATEST(COALESCE(p_threshold_s, 0), 0), 3153600000) * 1000000)
                           MICROSECOND;
    CREATE TEMPORARY TABLE IF NOT EXISTS claim_triggers_v2_ids (id BIGINT PRIMARY KEY);
    CREATE TEMPORARY TABLE IF NOT EXISTS claim_triggers_v2_bad (dag_id VARCHAR(250) PRIMARY KEY);
    DELETE FROM claim_triggers_v2_ids;
    DELETE FROM claim_triggers_v2_bad;

    -- 1. Timeouts, each after its own savepoint.
    SET v_done = FALSE;
    OPEN c_timeouts;
    timeouts: LOOP
        FETCH c_timeouts INTO v_id, v_ti, v_secs;
        IF v_done THEN
            LEAVE timeouts;
        END IF;
        SELECT MAX(ti.dag_id) INTO v_dag_id FROM task_instance ti WHERE ti.id = v_ti;
        one_timeout: BEGIN
            DECLARE EXIT HANDLER FOR SQLEXCEPTION
            BEGIN
                GET DIAGNOSTICS CONDITION 1 v_msg = MESSAGE_TEXT, v_errno = MYSQL_ERRNO;
                ROLLBACK TO SAVEPOINT claim_triggers_v2_one;
                SET v_msg = LEFT(REGEXP_REPLACE(CONCAT('could not fire timed-out trigger ', v_id, ' of TI ',
                                                       COALESCE(v_ti, 'NULL'), ': ', COALESCE(v_msg, '?'),
                                                       ' [error ', COALESCE(v_errno, '?'), ']'),
                                                '[[:space:]]+', ' '), 4000);
                INSERT INTO claim_triggers_v2_bad (dag_id) VALUES (COALESCE(v_dag_id, ''))
                ON DUPLICATE KEY UPDATE dag_id = dag_id;
                UPDATE dag SET error_step = 'claim_triggers', error = v_msg, error_at = v_now WHERE dag_id = v_dag_id;
                UPDATE task_instance SET state_reason = LEFT(CONCAT('claim_triggers: ', v_msg), 4000) WHERE id = v_ti;
            END;
            SAVEPOINT claim_triggers_v2_one;
            SET v_state = fire_trigger_v2(v_id, NULL, CONCAT('trigger timed out (timeout ', ROUND(v_secs, 3), ' s)'),
                                          v_now, 0);
            IF v_state IS NOT NULL THEN
                UPDATE dag d SET d.error = NULL, d.error_at = NULL, d.error_step = NULL
                WHERE d.dag_id = v_dag_id AND d.error_step = 'claim_triggers'
                  AND NOT EXISTS (SELECT 1 FROM claim_triggers_v2_bad b WHERE b.dag_id = v_dag_id);
            END IF;
            RELEASE SAVEPOINT claim_triggers_v2_one;
        END one_timeout;
    END LOOP;
    CLOSE c_timeouts;

    -- 2. Dead triggerers.
    UPDATE job j SET j.state = 'failed', j.end_date = v_now
    WHERE j.kind = 'triggerer' AND j.state = 'running' AND j.latest_heartbeat < v_cutoff AND NOT (j.id <=> p_job_id);

    -- 3. Close triggers nobody waits on any more, then claim.
    SET v_done = FALSE;
    OPEN c_orphans;
    orphans: LOOP
        FETCH c_orphans INTO v_id;
        IF v_done THEN
            LEAVE orphans;
        END IF;
        UPDATE `trigger` SET fired_at = v_now, error = 'task instance no longer waits on this trigger' WHERE id = v_id;
    END LOOP;
    CLOSE c_orphans;

    SET v_done = FALSE;
    OPEN c_claim;
    claiming: LOOP
        FETCH c_claim INTO v_id;
        IF v_done THEN
            LEAVE claiming;
        END IF;
        INSERT INTO claim_triggers_v2_ids (id) VALUES (v_id);
    END LOOP;
    CLOSE c_claim;
    UPDATE claim_triggers_v2_ids c
    STRAIGHT_JOIN `trigger` g ON c.id = g.id
    SET g.triggerer_job_id = p_job_id
    WHERE g.fired_at IS NULL;

    SELECT g.id AS trigger_id, g.classpath, g.kwargs, g.created_at, d.fileloc
    FROM claim_triggers_v2_ids c
    JOIN `trigger` g ON g.id = c.id
    LEFT JOIN task_instance ti ON ti.id = g.ti_id
    LEFT JOIN dag d ON d.dag_id = ti.dag_id
    WHERE g.triggerer_job_id <=> p_job_id AND g.fired_at IS NULL
    ORDER BY g.id;
END
