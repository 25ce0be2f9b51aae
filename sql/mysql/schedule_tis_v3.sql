-- schedule_tis_v3(now, batch): schedule_tis_v2 (below) plus dynamic task mapping. A task mapped
-- over an upstream's result (`.expand(x=upstream.output)`: task.map_upstream names the upstream)
-- has one TI per run at first, with map_index -1. When the trigger rules schedule that TI, the
-- upstream's output (task_output_v1) decides, in the same statement set:
--   * a list of n items (1 <= n <= 100,000, engine/validate.py MAX_MAP_LENGTH): the TI becomes
--     map_index 0 and n - 1 more TIs (map_index 1 .. n-1) are created `scheduled`, with the same
--     pool, priority and limits as any TI: queue_tis counts them against every limit as usual.
--     Each one's element is read by the worker when it starts the try (named query task_inputs);
--   * an empty list: the TI is `skipped` (reason 'mapped over an empty list'), and its
--     downstream follows the trigger rules in the same call;
--   * no result, or not a list, or more than 100,000 items: the TI is `failed` with a reason
--     naming the upstream and what it returned; its downstream becomes upstream_failed.
-- Mapped TIs of a task mapped over literal lists are made at run start (map_count), as before.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: as v2 (the new TIs belong to a run of the batch, whose
-- row is locked; nothing else creates TIs of a running run). Counts: a mapped TI that is
-- created counts in tis_scheduled, an empty-list skip in tis_skipped, a failed expansion in
-- tis_upstream_failed (the TI failed before it ran).
--
-- As schedule_tis_v2(now, batch): move a batch of running dag runs forward. As schedule_tis_v1,
-- plus removed tasks and per-run isolation. For the runs of the batch:
--   * TIs in state 'none', 'scheduled' or 'up_for_retry' whose task a sync removed (no active
--     task row) become `removed` (Airflow's state): they never run; first, so nothing below
--     schedules them;
--   * up_for_retry TIs whose retry_at has passed become `scheduled`;
--   * TIs in state 'none' whose upstream TIs allow it become `scheduled`, `skipped` or
--     `upstream_failed` by their trigger rule (repeated so skips and failures propagate down
--     a whole chain in one call);
--   * runs whose TIs are all done (success, failed, skipped, upstream_failed or removed) become
--     `success`, or `failed` when a leaf task failed or is upstream_failed (Airflow's rule; a
--     removed TI is done and is not a failure).
--
-- ISOLATION: one run's bad data never stops the others. PostgreSQL moves the batch with
-- set-based statements and retries it run by run when they raise; here every run of the batch
-- is moved on its own, after its own SAVEPOINT, in a block whose EXIT HANDLER rolls back to it
-- (see MySQL below for why): a run that fails is left as it was and its DAG gets
-- dag.error_step = 'schedule_tis', dag.error = one line naming the run and the error,
-- dag.error_at = now; the other runs move on. When every run of a DAG examined by a call
-- succeeds, the call clears a 'schedule_tis' error of that DAG. Deadlocks (1213) and lock wait timeouts (1205) are not a run's fault:
-- they are raised again, as by v1. Every run of the batch, failed or not, gets
-- last_scheduling_decision = now, so a failing run goes to the back of the line.
--
-- LOCK: the `dag_run` rows of the batch, FOR UPDATE SKIP LOCKED, oldest scheduling decision
-- first: concurrent schedulers take disjoint batches and never wait for each other. A `dag`
-- row is written only to record or clear an error (then it is locked to commit).
-- INVARIANT: only schedule_tis moves a TI out of 'none' and a run out of 'running', each as a
-- compare-and-set on the state it expects; a run's changes are all made or none.
-- CALLERS MAY ASSUME: it returns counts (v1's, then tis_removed and runs_errored: runs whose
-- error was recorded), raises only for transient lock errors, never blocks on another
-- scheduler's batch, and a run skipped because it was locked is examined on a later call.
-- Call it inside a transaction (autocommit off, as the engine does): savepoints need one.
--
-- MySQL: a PROCEDURE whose final SELECT returns the counts; the batch is claimed through a
-- cursor into a temporary table. PL/pgSQL's BEGIN ... EXCEPTION is a SAVEPOINT plus an EXIT
-- HANDLER FOR SQLEXCEPTION that rolls back to it; the error is read with GET DIAGNOSTICS.
-- MariaDB (10.11, tested) lets an error raised inside a multi-table UPDATE escape every handler,
-- even one around a CALL: the whole procedure fails. So v1's set-based UPDATEs driven by a
-- temporary table (STRAIGHT_JOIN) cannot be isolated; instead every statement here is
-- single-table and keyed by one run (`dag_run_id = v_run`, a range of the unique key
-- (dag_run_id, task_id, map_index): only that run's TIs are read and locked, and a single-table
-- UPDATE skips rows other transactions lock that it does not change). Decisions are read first
-- (INSERT ... SELECT or SELECT ... INTO: plain reads, no locks) and applied by UPDATEs that
-- compare-and-set the state. Cost: about a dozen statements per run instead of per batch.
-- New in v3: the temporary tables are v3's own (a routine whose temporary tables change shape
-- changes its version); a TI mapped over a result is expanded by statements keyed by that TI.
CREATE PROCEDURE schedule_tis_v3(IN p_now DATETIME(6), IN p_batch INT)
BEGIN
    DECLARE v_now        DATETIME(6);
    DECLARE v_done       BOOLEAN DEFAULT FALSE;
    DECLARE v_run        BIGINT;
    DECLARE v_dag_id     VARCHAR(250);
    DECLARE v_run_id     VARCHAR(250);
    DECLARE v_runs       INT DEFAULT 0;
    DECLARE v_pos        INT DEFAULT 1;
    DECLARE v_ok         BOOLEAN;
    DECLARE v_errno      INT;
    DECLARE v_msg        TEXT;
    DECLARE v_left       INT;
    DECLARE v_bad_leaves INT;
    DECLARE v_bad        INT DEFAULT 0;   -- runs whose error was recorded
    -- this run's counts: added to the totals only when its block succeeds
    DECLARE a_scheduled  INT;
    DECLARE a_skipped    INT;
    DECLARE a_upfailed   INT;
    DECLARE a_finished   INT;
    DECLARE a_removed    INT;
    DECLARE v_round_skip INT;
    DECLARE v_round_fail INT;
    DECLARE v_scheduled  INT DEFAULT 0;
    DECLARE v_skipped    INT DEFAULT 0;
    DECLARE v_upfailed   INT DEFAULT 0;
    DECLARE v_finished   INT DEFAULT 0;
    DECLARE v_removed    INT DEFAULT 0;
    DECLARE x_id         BIGINT;       -- dynamic mapping (v3): the TI being expanded,
    DECLARE x_next       BIGINT;
    DECLARE x_up         VARCHAR(250); -- the upstream whose result it maps over,
    DECLARE x_out        LONGTEXT;     -- that result,
    DECLARE x_n          INT;          -- and its length when it is a list
    DECLARE c_runs CURSOR FOR
        SELECT dr.id, dr.dag_id, dr.run_id FROM dag_run dr
        WHERE dr.state = 'running'
        ORDER BY dr.last_scheduling_decision, dr.id
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET p_batch = COALESCE(p_batch, 100);
    -- outcome: 'o' moved, 'e' its error was recorded
    CREATE TEMPORARY TABLE IF NOT EXISTS schedule_tis_v3_runs (
        pos INT PRIMARY KEY, id BIGINT NOT NULL, dag_id VARCHAR(250), run_id VARCHAR(250), outcome CHAR(1));
    CREATE TEMPORARY TABLE IF NOT EXISTS schedule_tis_v3_decided (id BIGINT PRIMARY KEY, new_state VARCHAR(20));
    CREATE TEMPORARY TABLE IF NOT EXISTS schedule_tis_v3_clear (dag_id VARCHAR(250) PRIMARY KEY);
    DELETE FROM schedule_tis_v3_runs;
    DELETE FROM schedule_tis_v3_clear;

    OPEN c_runs;
    fetching: LOOP
        FETCH c_runs INTO v_run, v_dag_id, v_run_id;
        IF v_done THEN
            LEAVE fetching;
        END IF;
        SET v_runs = v_runs + 1;
        INSERT INTO schedule_tis_v3_runs (pos, id, dag_id, run_id) VALUES (v_runs, v_run, v_dag_id, v_run_id);
    END LOOP;
    CLOSE c_runs;

    each_run: WHILE v_pos <= v_runs DO
        SELECT b.id, b.dag_id, b.run_id INTO v_run, v_dag_id, v_run_id FROM schedule_tis_v3_runs b WHERE b.pos = v_pos;
        SET v_ok = FALSE;
        SAVEPOINT schedule_tis_v3;
        one_run: BEGIN
            DECLARE EXIT HANDLER FOR SQLEXCEPTION
            BEGIN
                GET DIAGNOSTICS CONDITION 1 v_errno = MYSQL_ERRNO, v_msg = MESSAGE_TEXT;
                IF v_errno IN (1213, 1205) THEN
                    RESIGNAL;   -- transient, nobody's data: the whole call fails as v1 would
                END IF;
                ROLLBACK TO SAVEPOINT schedule_tis_v3;
            END;
            SET a_scheduled = 0, a_skipped = 0, a_upfailed = 0, a_finished = 0;

            -- Tasks a sync removed: their unstarted TIs never run.
            DELETE FROM schedule_tis_v3_decided;
            INSERT INTO schedule_tis_v3_decided (id, new_state)
            SELECT ti.id, 'removed'
            FROM task_instance ti
            LEFT JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id AND t.is_active
            WHERE ti.dag_run_id = v_run AND ti.state IN ('none', 'scheduled', 'up_for_retry') AND t.task_id IS NULL;
            UPDATE task_instance ti SET ti.state = 'removed', ti.updated_at = v_now
            WHERE ti.dag_run_id = v_run AND ti.state IN ('none', 'scheduled', 'up_for_retry')
              AND ti.id IN (SELECT d.id FROM schedule_tis_v3_decided d);
            SET a_removed = ROW_COUNT();

            -- Retries whose delay has passed.
            UPDATE task_instance ti SET ti.state = 'scheduled', ti.updated_at = v_now
            WHERE ti.dag_run_id = v_run AND ti.state = 'up_for_retry' AND ti.retry_at <= v_now;
            SET a_scheduled = ROW_COUNT();

            -- Trigger rules. Each round decides every TI whose upstreams allow a decision; a
            -- round that skipped or failed something may unblock the next level, so repeat.
            rules: LOOP
                DELETE FROM schedule_tis_v3_decided;
                INSERT INTO schedule_tis_v3_decided (id, new_state)
                SELECT c.id,
                       CASE c.trigger_rule
                           WHEN 'all_success' THEN CASE
                               WHEN c.failed + c.upfailed > 0 THEN 'upstream_failed'
                               WHEN c.skipped > 0 THEN 'skipped'
                               WHEN c.ok = c.total THEN 'scheduled' END
                           WHEN 'all_failed' THEN CASE
                               WHEN c.ok + c.skipped > 0 THEN 'skipped'
                               WHEN c.failed + c.upfailed = c.total THEN 'scheduled' END
                           WHEN 'all_done' THEN CASE
                               WHEN c.done = c.total THEN 'scheduled' END
                           WHEN 'one_success' THEN CASE
                               WHEN c.ok > 0 OR c.total = 0 THEN 'scheduled'
                               WHEN c.done = c.total AND c.failed + c.upfailed > 0 THEN 'upstream_failed'
                               WHEN c.done = c.total THEN 'skipped' END
                           WHEN 'one_failed' THEN CASE
                               WHEN c.failed + c.upfailed > 0 OR c.total = 0 THEN 'scheduled'
                               WHEN c.done = c.total THEN 'skipped' END
                           WHEN 'none_failed' THEN CASE
                               WHEN c.failed + c.upfailed > 0 THEN 'upstream_failed'
                               WHEN c.done = c.total THEN 'scheduled' END
                           WHEN 'none_skipped' THEN CASE
                               WHEN c.skipped > 0 THEN 'skipped'
                               WHEN c.done = c.total THEN 'scheduled' END
                           WHEN 'always' THEN 'scheduled'
                       END
                FROM (
                    SELECT ti.id, t.trigger_rule,
                           COUNT(up.id) AS total,
                           SUM(CASE WHEN up.state = 'success' THEN 1 ELSE 0 END) AS ok,
                           SUM(CASE WHEN up.state = 'skipped' THEN 1 ELSE 0 END) AS skipped,
                           SUM(CASE WHEN up.state = 'failed' THEN 1 ELSE 0 END) AS failed,
                           SUM(CASE WHEN up.state = 'upstream_failed' THEN 1 ELSE 0 END) AS upfailed,
                           SUM(CASE WHEN up.state IN ('success', 'skipped', 'failed', 'upstream_failed') THEN 1 ELSE 0 END) AS done
                    FROM task_instance ti
                    JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
                    LEFT JOIN task_dependency dep ON dep.dag_id = ti.dag_id AND dep.task_id = ti.task_id
                    LEFT JOIN task_instance up ON up.dag_run_id = ti.dag_run_id AND up.task_id = dep.upstream_task_id
                    WHERE ti.dag_run_id = v_run AND ti.state = 'none'
                    GROUP BY ti.id, t.trigger_rule
                ) c;

                -- One UPDATE per new state (a compare-and-set on 'none'), so each count is exact.
                UPDATE task_instance ti SET ti.state = 'scheduled', ti.updated_at = v_now
                WHERE ti.dag_run_id = v_run AND ti.state = 'none'
                  AND ti.id IN (SELECT d.id FROM schedule_tis_v3_decided d WHERE d.new_state = 'scheduled');
                SET a_scheduled = a_scheduled + ROW_COUNT();
                UPDATE task_instance ti
                SET ti.state = 'skipped', ti.updated_at = v_now, ti.start_date = v_now, ti.end_date = v_now
                WHERE ti.dag_run_id = v_run AND ti.state = 'none'
                  AND ti.id IN (SELECT d.id FROM schedule_tis_v3_decided d WHERE d.new_state = 'skipped');
                SET v_round_skip = ROW_COUNT();
                UPDATE task_instance ti
                SET ti.state = 'upstream_failed', ti.updated_at = v_now, ti.start_date = v_now, ti.end_date = v_now
                WHERE ti.dag_run_id = v_run AND ti.state = 'none'
                  AND ti.id IN (SELECT d.id FROM schedule_tis_v3_decided d WHERE d.new_state = 'upstream_failed');
                SET v_round_fail = ROW_COUNT();
                SET a_skipped = a_skipped + v_round_skip;
                SET a_upfailed = a_upfailed + v_round_fail;
                -- Dynamic mapping (v3): TIs of a task mapped over an upstream's result, just
                -- scheduled with map_index -1, take the size of that result (header). One TI at
                -- a time (there are few): single-table statements keyed by the TI.
                SET x_id = 0;
                mapping: LOOP
                    SET x_next = NULL;
                    SELECT MIN(ti.id) INTO x_next
                    FROM task_instance ti
                    JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
                    WHERE ti.dag_run_id = v_run AND ti.state = 'scheduled' AND ti.map_index = -1
                      AND t.map_upstream IS NOT NULL AND ti.id > x_id;
                    IF x_next IS NULL THEN
                        LEAVE mapping;
                    END IF;
                    SET x_id = x_next;
                    SELECT MAX(t.map_upstream) INTO x_up
                    FROM task_instance ti JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
                    WHERE ti.id = x_id;
                    SET x_out = task_output_v1(v_run, x_up);
                    SET x_n = CASE WHEN x_out IS NOT NULL AND JSON_TYPE(x_out) = 'ARRAY' THEN JSON_LENGTH(x_out) END;
                    IF x_n BETWEEN 1 AND 100000 THEN
                        INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, max_tries,
                                                   priority_weight, pool, pool_slots, queue, executor, run_after,
                                                   updated_at)
                        SELECT ti.dag_run_id, ti.dag_id, ti.run_id, ti.task_id, m.i - 1, 'scheduled', ti.max_tries,
                               ti.priority_weight, ti.pool, ti.pool_slots, ti.queue, ti.executor, ti.run_after, v_now
                        FROM task_instance ti
                        JOIN JSON_TABLE(x_out, '$[*]' COLUMNS (i FOR ORDINALITY)) m
                        WHERE ti.id = x_id AND m.i > 1;
                        SET a_scheduled = a_scheduled + ROW_COUNT();
                        UPDATE task_instance ti SET ti.map_index = 0, ti.updated_at = v_now WHERE ti.id = x_id;
                    ELSE
                        UPDATE task_instance ti
                        SET ti.state = CASE WHEN x_n = 0 THEN 'skipped' ELSE 'failed' END,
                            ti.state_reason = CASE
                                WHEN x_n = 0 THEN CONCAT('mapped over an empty list (the result of ', x_up, ')')
                                WHEN x_out IS NULL THEN CONCAT('cannot map over the result of ', x_up, ': it has none ',
                                                               '(it did not succeed, or returned None); return a list from it')
                                WHEN x_n IS NULL THEN CONCAT('cannot map over the result of ', x_up, ': it is a ',
                                                             LOWER(JSON_TYPE(x_out)), ', not a list; return a list from it')
                                ELSE CONCAT('cannot map over the result of ', x_up, ': ', x_n,
                                            ' items, more than 100000 (MAX_MAP_LENGTH); return fewer') END,
                            ti.start_date = v_now, ti.end_date = v_now, ti.updated_at = v_now
                        WHERE ti.id = x_id;
                        IF x_n = 0 THEN
                            SET v_round_skip = v_round_skip + 1, a_skipped = a_skipped + 1;
                        ELSE
                            SET v_round_fail = v_round_fail + 1, a_upfailed = a_upfailed + 1;
                        END IF;
                    END IF;
                END LOOP;

                IF v_round_skip + v_round_fail = 0 THEN
                    LEAVE rules;
                END IF;
            END LOOP;
            DELETE FROM schedule_tis_v3_decided;

            -- Finish the run when its TIs are all done (removed counts as done, not as a
            -- failure): the verdict is read first (plain reads), then applied.
            SELECT COUNT(*) INTO v_left FROM task_instance ti
            WHERE ti.dag_run_id = v_run
              AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed');
            IF v_left = 0 THEN
                SELECT COUNT(*) INTO v_bad_leaves FROM task_instance ti
                WHERE ti.dag_run_id = v_run AND ti.state IN ('failed', 'upstream_failed')
                  AND NOT EXISTS (SELECT 1 FROM task_dependency dep
                                  WHERE dep.dag_id = ti.dag_id AND dep.upstream_task_id = ti.task_id);
                UPDATE dag_run r
                SET r.state = CASE WHEN v_bad_leaves > 0 THEN 'failed' ELSE 'success' END, r.end_date = v_now
                WHERE r.id = v_run AND r.state = 'running';
                SET a_finished = ROW_COUNT();
            END IF;
            SET v_ok = TRUE;
        END one_run;

        IF v_ok THEN
            RELEASE SAVEPOINT schedule_tis_v3;
            SET v_scheduled = v_scheduled + a_scheduled, v_skipped = v_skipped + a_skipped,
                v_upfailed = v_upfailed + a_upfailed, v_finished = v_finished + a_finished,
                v_removed = v_removed + a_removed;
            UPDATE schedule_tis_v3_runs b SET b.outcome = 'o' WHERE b.pos = v_pos;
        ELSE
            UPDATE schedule_tis_v3_runs b SET b.outcome = 'e' WHERE b.pos = v_pos;
            UPDATE dag d
            SET d.error_step = 'schedule_tis',
                d.error = REPLACE(CONCAT('run ', v_run_id, ': ', COALESCE(v_msg, CONCAT('error ', v_errno))), CHAR(10), ' '),
                d.error_at = v_now
            WHERE d.dag_id = v_dag_id;
            SET v_bad = v_bad + 1;
        END IF;
        SET v_pos = v_pos + 1;
    END WHILE;

    -- A DAG whose examined runs all moved is fine again (only this step's error is cleared).
    -- Which DAGs is read first, without locks; only DAGs with such an error are written.
    INSERT INTO schedule_tis_v3_clear (dag_id)
    SELECT b.dag_id FROM schedule_tis_v3_runs b
    JOIN dag d ON d.dag_id = b.dag_id AND d.error_step = 'schedule_tis'
    GROUP BY b.dag_id
    HAVING SUM(CASE WHEN b.outcome = 'e' THEN 1 ELSE 0 END) = 0;
    UPDATE schedule_tis_v3_clear c
    STRAIGHT_JOIN dag d ON c.dag_id = d.dag_id
    SET d.error_step = NULL, d.error = NULL, d.error_at = NULL
    WHERE d.error_step = 'schedule_tis';

    UPDATE schedule_tis_v3_runs b
    STRAIGHT_JOIN dag_run r ON b.id = r.id
    SET r.last_scheduling_decision = v_now;
    DELETE FROM schedule_tis_v3_runs;

    SELECT v_runs AS runs_examined, v_scheduled AS tis_scheduled, v_skipped AS tis_skipped,
           v_upfailed AS tis_upstream_failed, v_finished AS runs_finished, v_removed AS tis_removed,
           v_bad AS runs_errored;
END
