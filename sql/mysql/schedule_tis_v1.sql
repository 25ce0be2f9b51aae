-- schedule_tis_v1(now, batch): move a batch of running dag runs forward.
--   * up_for_retry TIs whose retry_at has passed become `scheduled`;
--   * TIs in state 'none' whose upstream TIs allow it become `scheduled`, `skipped` or
--     `upstream_failed` by their trigger rule (repeated so skips and failures propagate down
--     a whole chain in one call);
--   * runs whose TIs are all done become `success`, or `failed` when a leaf task failed or
--     is upstream_failed (Airflow's rule).
--
-- Lock: the `dag_run` rows of the batch, FOR UPDATE SKIP LOCKED, oldest scheduling decision
-- first: concurrent schedulers take disjoint batches and never wait for each other.
-- Invariant: only this function moves a TI out of 'none' and a run out of 'running', each
-- as a compare-and-set on the state it expects.
-- Callers may assume: it returns counts, never blocks on another scheduler, and a run is
-- examined again on a later call when it was skipped because it was locked.
--
-- MySQL: a PROCEDURE whose final SELECT returns the counts; no parameter defaults (the named
-- query passes batch). The batch is claimed through a cursor (a locking read) into a session
-- temporary table instead of an array; no FILTER on aggregates (SUM(CASE ...)); no
-- UPDATE ... RETURNING: the decisions go to a temporary table first, then one UPDATE per new
-- state counts its rows. Every temporary table appears once per statement (MySQL cannot
-- reopen one), and UPDATEs are driven by it (STRAIGHT_JOIN) rather than test
-- `id IN (subquery)`, which MariaDB 10.11 plans as a scan of the updated table that would lock
-- other transactions' rows (see claim_tis_v1). ASC puts NULLs first in MySQL, as NULLS FIRST asks.
CREATE PROCEDURE schedule_tis_v1(IN p_now DATETIME(6), IN p_batch INT)
BEGIN
    DECLARE v_now       DATETIME(6);
    DECLARE v_done      BOOLEAN DEFAULT FALSE;
    DECLARE v_id        BIGINT;
    DECLARE v_runs      INT DEFAULT 0;
    DECLARE v_n         INT;
    DECLARE v_scheduled INT DEFAULT 0;
    DECLARE v_skipped   INT DEFAULT 0;
    DECLARE v_upfailed  INT DEFAULT 0;
    DECLARE v_round_skip INT;
    DECLARE v_round_fail INT;
    DECLARE v_finished  INT DEFAULT 0;
    DECLARE c_runs CURSOR FOR
        SELECT dr.id FROM dag_run dr
        WHERE dr.state = 'running'
        ORDER BY dr.last_scheduling_decision, dr.id
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SET p_batch = COALESCE(p_batch, 100);
    CREATE TEMPORARY TABLE IF NOT EXISTS schedule_tis_v1_runs (id BIGINT PRIMARY KEY);
    CREATE TEMPORARY TABLE IF NOT EXISTS schedule_tis_v1_decided (id BIGINT PRIMARY KEY, new_state VARCHAR(20));
    CREATE TEMPORARY TABLE IF NOT EXISTS schedule_tis_v1_finished (id BIGINT PRIMARY KEY, new_state VARCHAR(20));
    DELETE FROM schedule_tis_v1_runs;

    OPEN c_runs;
    fetching: LOOP
        FETCH c_runs INTO v_id;
        IF v_done THEN
            LEAVE fetching;
        END IF;
        INSERT INTO schedule_tis_v1_runs (id) VALUES (v_id);
        SET v_runs = v_runs + 1;
    END LOOP;
    CLOSE c_runs;

    -- Retries whose delay has passed.
    UPDATE schedule_tis_v1_runs r
    STRAIGHT_JOIN task_instance ti ON r.id = ti.dag_run_id
    SET ti.state = 'scheduled', ti.updated_at = v_now
    WHERE ti.state = 'up_for_retry' AND ti.retry_at <= v_now;
    SET v_scheduled = v_scheduled + ROW_COUNT();

    -- Trigger rules. Each round decides every TI whose upstreams allow a decision; a round
    -- that skipped or failed something may unblock the next level, so repeat until quiet.
    rules: LOOP
        DELETE FROM schedule_tis_v1_decided;
        INSERT INTO schedule_tis_v1_decided (id, new_state)
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
            FROM schedule_tis_v1_runs br
            JOIN task_instance ti ON ti.dag_run_id = br.id AND ti.state = 'none'
            JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
            LEFT JOIN task_dependency dep ON dep.dag_id = ti.dag_id AND dep.task_id = ti.task_id
            LEFT JOIN task_instance up ON up.dag_run_id = ti.dag_run_id AND up.task_id = dep.upstream_task_id
            GROUP BY ti.id, t.trigger_rule
        ) c;

        -- One UPDATE per new state (a compare-and-set on 'none'), so each count is exact.
        UPDATE schedule_tis_v1_decided d
        STRAIGHT_JOIN task_instance ti ON d.id = ti.id AND d.new_state = 'scheduled'
        SET ti.state = 'scheduled', ti.updated_at = v_now
        WHERE ti.state = 'none';
        SET v_scheduled = v_scheduled + ROW_COUNT();
        UPDATE schedule_tis_v1_decided d
        STRAIGHT_JOIN task_instance ti ON d.id = ti.id AND d.new_state = 'skipped'
        SET ti.state = 'skipped', ti.updated_at = v_now, ti.start_date = v_now, ti.end_date = v_now
        WHERE ti.state = 'none';
        SET v_round_skip = ROW_COUNT();
        UPDATE schedule_tis_v1_decided d
        STRAIGHT_JOIN task_instance ti ON d.id = ti.id AND d.new_state = 'upstream_failed'
        SET ti.state = 'upstream_failed', ti.updated_at = v_now, ti.start_date = v_now, ti.end_date = v_now
        WHERE ti.state = 'none';
        SET v_round_fail = ROW_COUNT();
        SET v_skipped = v_skipped + v_round_skip;
        SET v_upfailed = v_upfailed + v_round_fail;
        IF v_round_skip + v_round_fail = 0 THEN
            LEAVE rules;
        END IF;
    END LOOP;
    DELETE FROM schedule_tis_v1_decided;

    -- Finish runs whose TIs are all done. The verdicts are read first (INSERT ... SELECT reads
    -- without locks under READ COMMITTED, as PostgreSQL's subqueries do), then applied: a
    -- subquery inside a multi-table UPDATE would take shared locks on the TIs it reads (MariaDB).
    DELETE FROM schedule_tis_v1_finished;
    INSERT INTO schedule_tis_v1_finished (id, new_state)
    SELECT b.id,
           CASE WHEN EXISTS (
                    SELECT 1 FROM task_instance ti
                    WHERE ti.dag_run_id = b.id AND ti.state IN ('failed', 'upstream_failed')
                      AND NOT EXISTS (SELECT 1 FROM task_dependency dep
                                      WHERE dep.dag_id = ti.dag_id AND dep.upstream_task_id = ti.task_id))
                THEN 'failed' ELSE 'success' END
    FROM schedule_tis_v1_runs b
    WHERE NOT EXISTS (SELECT 1 FROM task_instance ti
                      WHERE ti.dag_run_id = b.id
                        AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed'));
    UPDATE schedule_tis_v1_finished f
    STRAIGHT_JOIN dag_run r ON f.id = r.id
    SET r.state = f.new_state, r.end_date = v_now
    WHERE r.state = 'running';
    SET v_finished = ROW_COUNT();

    UPDATE schedule_tis_v1_runs b
    STRAIGHT_JOIN dag_run r ON b.id = r.id
    SET r.last_scheduling_decision = v_now;
    DELETE FROM schedule_tis_v1_runs;

    SELECT v_runs AS runs_examined, v_scheduled AS tis_scheduled, v_skipped AS tis_skipped,
           v_upfailed AS tis_upstream_failed, v_finished AS runs_finished;
END
