-- reset_orphans_v3(threshold_s, interval_s, job_id, now): reset_orphans_v2 plus a fourth step:
--   4. tries being stopped whose worker is gone end as heartbeat_v3 ends them: `restarting` ->
--      `none`, `preempting` -> `scheduled` with max_tries + 1 and a history row 'preempted',
--      each with a state_change row naming the gone worker. Read
--      sql/postgresql/reset_orphans_v3.sql for the contract. Same arguments and result as v2.
--   MySQL: the TIs of step 4 are read FOR UPDATE SKIP LOCKED into a temporary table first.
-- What follows is v2's contract, unchanged.
-- reset_orphans_v3(threshold_s, interval_s, job_id, now): clean up after dead processes, at
-- most once per interval across all schedulers, without a leader.
--   1. jobs still `running` whose latest_heartbeat is older than threshold_s become `failed`
--      (end_date = now); the caller itself is never judged (it is running this);
--   2. `queued` TIs whose queued_by_job_id is a job no longer running are adopted by the
--      caller (queued_by_job_id := job_id); they stay queued, as the database queue needs;
--   3. `running` TIs whose worker job is no longer running (died, failed, or ended without
--      reporting), or that have no known worker job and a last_heartbeat_at older than
--      threshold_s, end as a failed try THROUGH finish_ti_v2 (exit code NULL), so retries,
--      history and slot release are the usual ones. The reason says why.
-- TIs whose job is alive are never touched, whatever their heartbeat: no ping-pong between
-- live schedulers or workers. Returns (ran, jobs_failed, tis_adopted, tis_failed); ran is
-- false when the check was not due.
--
-- New in v2: one orphan can no longer stop the cleanup for everyone. Each orphaned try is
-- finished after its own SAVEPOINT; when that fails, the handler rolls back to it, records the
-- error against the TI (state_reason; it stays running and is tried again next time) and its
-- DAG (dag.error_step = 'reset_orphans', error = one line naming the TI, error_at = now), and
-- the other orphans go on. A DAG's reset_orphans error is cleared when an orphan of that DAG
-- is next finished. finish_ti_v2 clamps the retry delay, so no stored task value fails it.
-- threshold_s and interval_s are clamped into [0, 3,153,600,000 s] (engine/validate.py
-- MAX_SECONDS).
--
-- Lock: the row scheduler_lock('reset_orphans'), held to commit; its last_run_at is the "last
-- done" stamp. A caller that cannot take it gets an error at once: MariaDB refuses NOWAIT in a
-- stored procedure, so the row is read FOR UPDATE SKIP LOCKED and, when another transaction
-- holds it, the procedure raises MySQL 8's NOWAIT error, 3572 ER_LOCK_NOWAIT (see queue_tis_v1):
-- the scheduler reports "busy" and goes on. TI rows are taken FOR UPDATE SKIP LOCKED (a row being
-- finished by its worker is that worker's to report).
-- Invariant: only jobs past the threshold by the database clock are declared dead, each
-- once (compare-and-set on state 'running' and the heartbeat, re-checked against a
-- concurrent heartbeat); each orphaned try is finished once (finish_ti_v2 is a
-- compare-and-set on running + try_number).
-- Callers may assume: calling it every tick is cheap (not due: one row lock and return);
-- a job that was declared dead learns it from heartbeat_v1 returning false; no value stored
-- in a TI or task makes it raise. Call it inside a transaction (the engine's connections have
-- autocommit off): the savepoints need one.
--
-- MySQL: a PROCEDURE whose final SELECT returns the one row. The locking cursors read
-- task_instance alone and look at `job` in subqueries, which a locking read does not lock
-- (MariaDB has no FOR UPDATE OF; a locked job row under SKIP LOCKED would otherwise vanish
-- from a join and be mistaken for a missing job). NULL-safe <=> for IS [NOT] DISTINCT FROM.
-- PostgreSQL's BEGIN ... EXCEPTION is a block with an EXIT HANDLER FOR SQLEXCEPTION and a
-- SAVEPOINT; the DAGs that failed in this call are kept in a session temporary table.
CREATE PROCEDURE reset_orphans_v3(IN p_threshold_s DOUBLE, IN p_interval_s DOUBLE, IN p_job_id BIGINT,
                                  IN p_now DATETIME(6))
body: BEGIN
    DECLARE c_max_s  DOUBLE DEFAULT 3153600000;  -- engine/validate.py MAX_SECONDS
    DECLARE v_now    DATETIME(6);
    DECLARE v_cutoff DATETIME(6);
    DECLARE v_last   DATETIME(6);
    DECLARE v_locked INT;
    DECLARE v_done   BOOLEAN DEFAULT FALSE;
    DECLARE v_id     BIGINT;
    DECLARE v_try    INT;
    DECLARE v_worker BIGINT;
    DECLARE v_dag_id VARCHAR(250);
    DECLARE v_task_id VARCHAR(250);
    DECLARE v_run_id VARCHAR(250);
    DECLARE v_job_id BIGINT;
    DECLARE v_job_state VARCHAR(20);
    DECLARE v_reason TEXT;
    DECLARE v_msg    TEXT;
    DECLARE v_errno  INT;
    DECLARE v_jobs   INT DEFAULT 0;
    DECLARE v_adopt  INT DEFAULT 0;
    DECLARE v_failed INT DEFAULT 0;
    DECLARE c_queued CURSOR FOR
        SELECT ti.id FROM task_instance ti
        WHERE ti.state = 'queued' AND NOT (ti.queued_by_job_id <=> p_job_id)
          AND ti.queued_by_job_id IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM job j WHERE j.id = ti.queued_by_job_id AND j.state = 'running')
        FOR UPDATE SKIP LOCKED;
    DECLARE c_running CURSOR FOR
        SELECT ti.id, ti.try_number, ti.worker_job_id, ti.dag_id, ti.task_id, ti.run_id
        FROM task_instance ti
        WHERE ti.state = 'running'
          AND CASE WHEN NOT EXISTS (SELECT 1 FROM job j WHERE j.id = ti.worker_job_id)
                   THEN COALESCE(ti.last_heartbeat_at, ti.start_date) < v_cutoff
                   ELSE EXISTS (SELECT 1 FROM job j WHERE j.id = ti.worker_job_id AND j.state <> 'running') END
        ORDER BY ti.id
        FOR UPDATE SKIP LOCKED;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET v_cutoff = v_now - INTERVAL ROUND(LEAST(GREATEST(COALESCE(p_threshold_s, 0), 0), c_max_s) * 1000000)
                           MICROSECOND;
    SELECT COUNT(*), MAX(l.last_run_at) INTO v_locked, v_last
    FROM scheduler_lock l WHERE l.name = 'reset_orphans' FOR UPDATE SKIP LOCKED;
    IF v_locked = 0 THEN
        SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 3572,
            MESSAGE_TEXT = 'reset_orphans_v3 is busy: another scheduler holds scheduler_lock reset_orphans';
    END IF;
    IF v_last IS NOT NULL
       AND v_last > v_now - INTERVAL ROUND(LEAST(GREATEST(COALESCE(p_interval_s, 0), 0), c_max_s) * 1000000)
                             MICROSECOND THEN
        SELECT FALSE AS ran, 0 AS jobs_failed, 0 AS tis_adopted, 0 AS tis_failed;
        LEAVE body;
    END IF;
    UPDATE scheduler_lock SET last_run_at = v_now WHERE name = 'reset_orphans';

    -- 1. Dead jobs. A heartbeat committed meanwhile is seen by the re-check of the WHERE.
    UPDATE job j SET j.state = 'failed', j.end_date = v_now
    WHERE j.state = 'running' AND j.latest_heartbeat < v_cutoff AND NOT (j.id <=> p_job_id);
    SET v_jobs = ROW_COUNT();

    -- 2. Queued TIs of schedulers that are gone.
    CREATE TEMPORARY TABLE IF NOT EXISTS reset_orphans_v3_ids (id BIGINT PRIMARY KEY);
    CREATE TEMPORARY TABLE IF NOT EXISTS reset_orphans_v3_bad (dag_id VARCHAR(250) PRIMARY KEY);
    DELETE FROM reset_orphans_v3_ids;
    DELETE FROM reset_orphans_v3_bad;
    SET v_done = FALSE;
    OPEN c_queued;
    fetching: LOOP
        FETCH c_queued INTO v_id;
        IF v_done THEN
            LEAVE fetching;
        END IF;
        INSERT INTO reset_orphans_v3_ids (id) VALUES (v_id);
    END LOOP;
    CLOSE c_queued;
    SELECT COUNT(*) INTO v_adopt FROM reset_orphans_v3_ids;  -- all locked by us: all adopted
    UPDATE reset_orphans_v3_ids o
    STRAIGHT_JOIN task_instance ti ON o.id = ti.id
    SET ti.queued_by_job_id = p_job_id, ti.updated_at = v_now
    WHERE ti.state = 'queued';

    -- 3. Running TIs nobody will report, each after its own savepoint.
    SET v_done = FALSE;
    OPEN c_running;
    orphans: LOOP
        FETCH c_running INTO v_id, v_try, v_worker, v_dag_id, v_task_id, v_run_id;
        IF v_done THEN
            LEAVE orphans;
        END IF;
        SELECT MAX(j.id), MAX(j.state) INTO v_job_id, v_job_state FROM job j WHERE j.id = v_worker;
        SET v_reason = CASE WHEN v_job_id IS NULL THEN 'task heartbeat stale'
                            WHEN v_job_state = 'failed' THEN CONCAT('worker job ', v_job_id, ' died')
                            ELSE CONCAT('worker job ', v_job_id, ' ended (', v_job_state, ') without reporting the try')
                       END;
        one_orphan: BEGIN
            DECLARE EXIT HANDLER FOR SQLEXCEPTION
            BEGIN
                GET DIAGNOSTICS CONDITION 1 v_msg = MESSAGE_TEXT, v_errno = MYSQL_ERRNO;
                ROLLBACK TO SAVEPOINT reset_orphans_v3_one;
                SET v_msg = LEFT(REGEXP_REPLACE(CONCAT('could not end orphaned try ', v_try, ' of TI ', v_id, ' (task ',
                                                       v_task_id, ', run ', v_run_id, '): ', COALESCE(v_msg, '?'),
                                                       ' [error ', COALESCE(v_errno, '?'), ']'),
                                                '[[:space:]]+', ' '), 4000);
                INSERT INTO reset_orphans_v3_bad (dag_id) VALUES (v_dag_id) ON DUPLICATE KEY UPDATE dag_id = dag_id;
                UPDATE dag SET error_step = 'reset_orphans', error = v_msg, error_at = v_now WHERE dag_id = v_dag_id;
                UPDATE task_instance SET state_reason = LEFT(CONCAT('reset_orphans: ', v_msg), 4000) WHERE id = v_id;
            END;
            SAVEPOINT reset_orphans_v3_one;
            IF finish_ti_v2(v_id, v_try, NULL, FALSE, v_reason, v_now) IS NOT NULL THEN
                SET v_failed = v_failed + 1;
                UPDATE dag d SET d.error_step = NULL, d.error = NULL, d.error_at = NULL
                WHERE d.dag_id = v_dag_id AND d.error_step = 'reset_orphans'
                  AND NOT EXISTS (SELECT 1 FROM reset_orphans_v3_bad b WHERE b.dag_id = v_dag_id);
            END IF;
            RELEASE SAVEPOINT reset_orphans_v3_one;
        END one_orphan;
    END LOOP;
    CLOSE c_running;

    -- 4. Tries being stopped whose worker is gone (see above).
    CREATE TEMPORARY TABLE IF NOT EXISTS reset_orphans_v3_gone (id BIGINT PRIMARY KEY, why VARCHAR(200));
    DELETE FROM reset_orphans_v3_gone;
    INSERT INTO reset_orphans_v3_gone (id, why)
    SELECT ti.id, COALESCE((SELECT CONCAT('its worker job ', j.id, ' is gone (', j.state, ')') FROM job j
                            WHERE j.id = ti.worker_job_id), 'its task heartbeat is stale')
    FROM task_instance ti
    WHERE ti.state IN ('restarting', 'preempting')
      AND CASE WHEN NOT EXISTS (SELECT 1 FROM job j WHERE j.id = ti.worker_job_id)
               THEN COALESCE(ti.last_heartbeat_at, ti.start_date) < v_cutoff
               ELSE EXISTS (SELECT 1 FROM job j WHERE j.id = ti.worker_job_id AND j.state <> 'running') END
    FOR UPDATE SKIP LOCKED;
    INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                              to_state, reason)
    SELECT v_now, CASE ti.state WHEN 'restarting' THEN 'restarted' ELSE 'preempted' END, ti.dag_id, ti.run_id,
           ti.task_id, ti.map_index, ti.id, ti.try_number, ti.state,
           CASE ti.state WHEN 'restarting' THEN 'none' ELSE 'scheduled' END,
           CONCAT(CASE ti.state WHEN 'restarting' THEN 'the cleared try has stopped: '
                                ELSE 'the preempted try has stopped: ' END, g.why)
    FROM reset_orphans_v3_gone g STRAIGHT_JOIN task_instance ti ON ti.id = g.id;
    INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                       pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                       worker_job_id, log_path, reason)
    SELECT v.id, v.dag_id, v.run_id, v.task_id, v.map_index, v.try_number, 'preempted', v.pool, v.pool_slots,
           v.queued_at, v.start_date, v_now, NULL, v.hostname, v.worker_job_id, v.log_path, v.state_reason
    FROM reset_orphans_v3_gone g STRAIGHT_JOIN task_instance v ON v.id = g.id
    WHERE v.state = 'preempting';
    UPDATE reset_orphans_v3_gone g STRAIGHT_JOIN task_instance ti ON ti.id = g.id
    SET ti.state = 'none', ti.worker_job_id = NULL, ti.hostname = NULL, ti.updated_at = v_now
    WHERE ti.state = 'restarting';
    UPDATE reset_orphans_v3_gone g STRAIGHT_JOIN task_instance ti ON ti.id = g.id
    SET ti.state = 'scheduled', ti.max_tries = ti.max_tries + 1, ti.end_date = v_now, ti.exit_code = NULL,
        ti.queued_at = NULL, ti.queued_by_job_id = NULL, ti.retry_at = NULL, ti.worker_job_id = NULL,
        ti.hostname = NULL, ti.updated_at = v_now
    WHERE ti.state = 'preempting';

    SELECT TRUE AS ran, v_jobs AS jobs_failed, v_adopt AS tis_adopted, v_failed AS tis_failed;
END
