-- clean_v1(table, older_than_s, batch, dry_run, interval_s, now): retention. Deletes rows older
-- than older_than_s, at most `batch` rows per table per call, so each call is one short
-- transaction; call it again while any row says more = true (`engine db clean` does; a DBA can
-- schedule `CALL clean_v1(NULL, 2592000, 1000, FALSE, NULL, NULL)` in an event every minute).
-- One row per table examined: (ran, table_name, deleted, more). With dry_run, deleted counts
-- every row that would go (nothing is deleted, more is false).
--
-- What goes, and what always stays (anything a live run or a live job still needs):
--   dag_run                runs in success/failed that ended before the cutoff, with their task
--                          instances (ON DELETE CASCADE); never the newest run of a DAG (as
--                          Airflow's `db clean` keeps the last run), never a run with a TI that
--                          has not finished (none/scheduled/queued/running/up_for_retry/deferred).
--                          `batch` counts runs.
--   task_instance_history  tries that ended before the cutoff, unless their run is queued/running.
--   trigger                triggers that fired (or ended) before the cutoff, unless a TI that has
--                          not finished still points at it (a resumed try reads its event).
--   job                    jobs no longer running that ended before the cutoff, unless an
--                          unfinished TI or an unfired trigger names it (reset_orphans reads the
--                          job to say why a try failed).
--   tick_log               scheduler passes that started before the cutoff.
-- table NULL: every table above, in that order; otherwise only the one named (an unknown name
-- raises one line listing the known ones).
--
-- interval_s: the scheduler passes clean_interval: when the cleanup last caught up (a call
-- that deleted fewer than `batch` rows from every table) less than interval_s ago, nothing is
-- done and one row (false, NULL, 0, false) comes back. While a backlog remains, every call
-- deletes one more batch per table (each scheduler pass does a bounded amount). NULL: always due.
-- older_than_s is clamped into [0, 3,153,600,000 s], batch into [1, 100000].
--
-- Lock: the row scheduler_lock('db_clean'), held to commit; its last_run_at is the "last caught
-- up" stamp. A second cleaner gets an error at once: MariaDB refuses NOWAIT in a stored
-- procedure, so the row is read FOR UPDATE SKIP LOCKED and, when another transaction holds it,
-- the procedure raises MySQL 8's NOWAIT error 3572 (see queue_tis_v1): the scheduler reports
-- "busy", `engine db clean` retries. The ids of a batch are read WITHOUT locks (a consistent
-- read at READ COMMITTED) into a session temporary table (MySQL has no LIMIT in IN (subquery)),
-- then deleted through their primary key with every condition checked again: InnoDB locks
-- every index record a locking read scans, so a FOR UPDATE selection over a large table
-- locked rows of live runs and made schedulers wait (loadtests/bench_clean.py); the
-- DELETE locks only the rows it deletes.
-- Invariant: no row that a run in queued/running, an unfinished TI or a running job can still
-- read is deleted; the conditions are re-checked on the locked rows (compare-and-set).
-- Callers may assume: one call holds row locks on at most `batch` rows per table (plus the
-- cascaded TIs of `batch` runs) and never touches rows of live runs, so a running scheduler
-- does not wait on it; calling it every pass is cheap when not due (one row lock).
--
-- MySQL: a PROCEDURE whose final SELECT returns the rows (kept in a session temporary table).
-- Call it inside a transaction (the engine's connections have autocommit off) at READ COMMITTED.
CREATE PROCEDURE clean_v1(IN p_table VARCHAR(64), IN p_older_than_s DOUBLE, IN p_batch INT, IN p_dry_run BOOLEAN,
                          IN p_interval_s DOUBLE, IN p_now DATETIME(6))
body: BEGIN
    DECLARE c_max_s  DOUBLE DEFAULT 3153600000;  -- engine/validate.py MAX_SECONDS
    DECLARE v_now    DATETIME(6);
    DECLARE v_cutoff DATETIME(6);
    DECLARE v_batch  INT;
    DECLARE v_last   DATETIME(6);
    DECLARE v_locked INT;
    DECLARE v_rows   BIGINT;
    DECLARE v_more   BOOLEAN DEFAULT FALSE;

    IF p_table IS NOT NULL
       AND p_table NOT IN ('dag_run', 'task_instance_history', 'trigger', 'job', 'tick_log') THEN
        SET @clean_v1_msg = LEFT(CONCAT('clean_v1: unknown table ', p_table,
                                        '; use one of dag_run, task_instance_history, trigger, job, tick_log'), 500);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = @clean_v1_msg;
    END IF;
    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET v_cutoff = v_now - INTERVAL ROUND(LEAST(GREATEST(COALESCE(p_older_than_s, c_max_s), 0), c_max_s) * 1000000)
                           MICROSECOND;
    SET v_batch = LEAST(GREATEST(COALESCE(p_batch, 1000), 1), 100000);
    SELECT COUNT(*), MAX(l.last_run_at) INTO v_locked, v_last
    FROM scheduler_lock l WHERE l.name = 'db_clean' FOR UPDATE SKIP LOCKED;
    IF v_locked = 0 THEN
        -- (A plain SELECT: a subquery in IF would take a shared lock and wait, in MariaDB, up to
        -- innodb_lock_wait_timeout, for the cleaner that holds the row.)
        SELECT COUNT(*) INTO v_locked FROM scheduler_lock l WHERE l.name = 'db_clean';
        IF v_locked = 0 THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'scheduler_lock row db_clean is missing; run `engine db upgrade`';
        END IF;
        SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 3572,
            MESSAGE_TEXT = 'clean_v1 is busy: another cleaner holds scheduler_lock db_clean';
    END IF;
    CREATE TEMPORARY TABLE IF NOT EXISTS clean_v1_out (
        pos INT PRIMARY KEY, ran BOOLEAN, table_name VARCHAR(64), deleted BIGINT, more BOOLEAN);
    CREATE TEMPORARY TABLE IF NOT EXISTS clean_v1_ids (id BIGINT PRIMARY KEY);
    DELETE FROM clean_v1_out;
    IF p_interval_s IS NOT NULL AND v_last IS NOT NULL
       AND v_last > v_now - INTERVAL ROUND(LEAST(GREATEST(p_interval_s, 0), c_max_s) * 1000000) MICROSECOND THEN
        SELECT FALSE AS ran, NULL AS table_name, 0 AS deleted, FALSE AS more;
        LEAVE body;
    END IF;

    -- dag_run: finished runs (never a DAG's newest, never one with an unfinished TI); their TIs
    -- go with them (ON DELETE CASCADE).
    IF p_table IS NULL OR p_table = 'dag_run' THEN
        DELETE FROM clean_v1_ids;
        IF p_dry_run THEN
            SELECT COUNT(*) INTO v_rows FROM dag_run r
            WHERE r.state IN ('success', 'failed') AND r.end_date < v_cutoff
              AND r.id < (SELECT MAX(n.id) FROM dag_run n WHERE n.dag_id = r.dag_id)
              AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.dag_run_id = r.id
                              AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed'));
        ELSE
            INSERT INTO clean_v1_ids (id)
            SELECT r.id FROM dag_run r
            WHERE r.state IN ('success', 'failed') AND r.end_date < v_cutoff
              AND r.id < (SELECT MAX(n.id) FROM dag_run n WHERE n.dag_id = r.dag_id)
              AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.dag_run_id = r.id
                              AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed'))
            LIMIT v_batch;
            DELETE d FROM clean_v1_ids i STRAIGHT_JOIN dag_run d ON d.id = i.id
            WHERE d.state IN ('success', 'failed') AND d.end_date < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.dag_run_id = d.id
                              AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed'));
            SET v_rows = ROW_COUNT();
        END IF;
        INSERT INTO clean_v1_out VALUES (1, TRUE, 'dag_run', v_rows, NOT p_dry_run AND v_rows >= v_batch);
    END IF;

    -- task_instance_history: tries that ended, unless their run is still queued/running.
    IF p_table IS NULL OR p_table = 'task_instance_history' THEN
        DELETE FROM clean_v1_ids;
        IF p_dry_run THEN
            SELECT COUNT(*) INTO v_rows FROM task_instance_history h
            WHERE h.end_date < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM dag_run r WHERE r.dag_id = h.dag_id AND r.run_id = h.run_id
                                                        AND r.state IN ('queued', 'running'));
        ELSE
            INSERT INTO clean_v1_ids (id)
            SELECT h.id FROM task_instance_history h
            WHERE h.end_date < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM dag_run r WHERE r.dag_id = h.dag_id AND r.run_id = h.run_id
                                                        AND r.state IN ('queued', 'running'))
            LIMIT v_batch;
            DELETE d FROM clean_v1_ids i STRAIGHT_JOIN task_instance_history d ON d.id = i.id
            WHERE d.end_date < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM dag_run r WHERE r.dag_id = d.dag_id AND r.run_id = d.run_id
                                                        AND r.state IN ('queued', 'running'));
            SET v_rows = ROW_COUNT();
        END IF;
        INSERT INTO clean_v1_out VALUES (2, TRUE, 'task_instance_history', v_rows, NOT p_dry_run AND v_rows >= v_batch);
    END IF;

    -- trigger: fired or ended, unless an unfinished TI still points at it.
    IF p_table IS NULL OR p_table = 'trigger' THEN
        DELETE FROM clean_v1_ids;
        IF p_dry_run THEN
            SELECT COUNT(*) INTO v_rows FROM `trigger` g
            WHERE g.fired_at < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.trigger_id = g.id
                              AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed'));
        ELSE
            INSERT INTO clean_v1_ids (id)
            SELECT g.id FROM `trigger` g
            WHERE g.fired_at < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.trigger_id = g.id
                              AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed'))
            LIMIT v_batch;
            DELETE d FROM clean_v1_ids i STRAIGHT_JOIN `trigger` d ON d.id = i.id
            WHERE d.fired_at < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.trigger_id = d.id
                              AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed'));
            SET v_rows = ROW_COUNT();
        END IF;
        INSERT INTO clean_v1_out VALUES (3, TRUE, 'trigger', v_rows, NOT p_dry_run AND v_rows >= v_batch);
    END IF;

    -- job: ended jobs nothing unfinished names.
    IF p_table IS NULL OR p_table = 'job' THEN
        DELETE FROM clean_v1_ids;
        IF p_dry_run THEN
            SELECT COUNT(*) INTO v_rows FROM job j
            WHERE j.state <> 'running' AND j.end_date < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.worker_job_id = j.id
                              AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed'))
              AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.state = 'queued' AND ti.queued_by_job_id = j.id)
              AND NOT EXISTS (SELECT 1 FROM `trigger` g WHERE g.fired_at IS NULL AND g.triggerer_job_id = j.id);
        ELSE
            INSERT INTO clean_v1_ids (id)
            SELECT j.id FROM job j
            WHERE j.state <> 'running' AND j.end_date < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.worker_job_id = j.id
                              AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed'))
              AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.state = 'queued' AND ti.queued_by_job_id = j.id)
              AND NOT EXISTS (SELECT 1 FROM `trigger` g WHERE g.fired_at IS NULL AND g.triggerer_job_id = j.id)
            LIMIT v_batch;
            DELETE d FROM clean_v1_ids i STRAIGHT_JOIN job d ON d.id = i.id
            WHERE d.state <> 'running' AND d.end_date < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.worker_job_id = d.id
                              AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed'))
              AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.state = 'queued' AND ti.queued_by_job_id = d.id)
              AND NOT EXISTS (SELECT 1 FROM `trigger` g WHERE g.fired_at IS NULL AND g.triggerer_job_id = d.id);
            SET v_rows = ROW_COUNT();
        END IF;
        INSERT INTO clean_v1_out VALUES (4, TRUE, 'job', v_rows, NOT p_dry_run AND v_rows >= v_batch);
    END IF;

    -- tick_log: scheduler passes.
    IF p_table IS NULL OR p_table = 'tick_log' THEN
        DELETE FROM clean_v1_ids;
        IF p_dry_run THEN
            SELECT COUNT(*) INTO v_rows FROM tick_log t WHERE t.started_at < v_cutoff;
        ELSE
            INSERT INTO clean_v1_ids (id)
            SELECT t.id FROM tick_log t WHERE t.started_at < v_cutoff
            LIMIT v_batch;
            DELETE d FROM clean_v1_ids i STRAIGHT_JOIN tick_log d ON d.id = i.id WHERE d.started_at < v_cutoff;
            SET v_rows = ROW_COUNT();
        END IF;
        INSERT INTO clean_v1_out VALUES (5, TRUE, 'tick_log', v_rows, NOT p_dry_run AND v_rows >= v_batch);
    END IF;

    SELECT COUNT(*) > 0 INTO v_more FROM clean_v1_out WHERE more;
    IF NOT p_dry_run AND NOT v_more AND p_table IS NULL THEN
        UPDATE scheduler_lock SET last_run_at = v_now WHERE name = 'db_clean';
    END IF;
    SELECT o.ran, o.table_name, o.deleted, o.more FROM clean_v1_out o ORDER BY o.pos;
END
