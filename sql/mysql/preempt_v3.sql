-- preempt_v3 (MySQL/MariaDB): preempt_v2 (read sql/mysql/preempt_v2.sql: the same arguments,
-- result and rules) that never waits for a TI row lock while it holds others, so that it can no
-- longer close a lock cycle with a worker's heartbeat (heartbeat_v3). v2 still deadlocked with
-- heartbeats (1-4 per 15 s race in loadtests/bench_preempt_deadlocks.py), in two cycles seen in
-- SHOW ENGINE INNODB STATUS:
--   * v2 read each victim's worker with `SET v_job = (SELECT ... FROM task_instance ...)`, and
--     MariaDB reads a subquery of SET (as of IF, and a table a multi-table UPDATE only reads)
--     with a SHARED lock, even under READ COMMITTED: the victim's primary record, before the
--     victim's task_instance_worker entry that a heartbeat takes first. v3 reads it with
--     SELECT MAX(...) INTO, a consistent read that takes no lock.
--   * v2 locked each waiting TI's victims in id order, but one call serves several waiting TIs
--     in turn, and the victims of a later one may have lower ids than those it already holds; a
--     heartbeat walking its TIs in id order then holds one and waits for the other. v3 takes
--     each victim lock with SKIP LOCKED: a victim still running that another transaction holds
--     ends the pass there, before that waiting TI's compare-and-set (nothing is moved for it; it
--     and the waiting TIs after it are served by the next pass). A victim that stopped running
--     meanwhile is dropped from the set, as v2's compare-and-set passed over it.
-- LOCK: scheduler_lock('queue_tis') (FOR UPDATE SKIP LOCKED; error 3572 at once when another
-- scheduler holds it), then each victim's task_instance_worker entry and primary record (FOR
-- UPDATE SKIP LOCKED, in id order per waiting TI), held until commit. It waits for no TI row lock
-- after its first victim lock.
-- INVARIANT: as preempt_v2 (the contract of sql/postgresql/preempt_v1.sql): victims move from
-- running to preempting only by the compare-and-set under their row locks; a waiting TI gets its
-- reservation only with its victims moved.
-- CALLERS MAY ASSUME: as preempt_v2; a pass may serve fewer waiting TIs than v2 would when a
-- heartbeat holds a victim at that moment (the next pass serves them).
CREATE PROCEDURE preempt_v3(IN p_now DATETIME(6), IN p_cooldown DOUBLE, IN p_max_per_pass INT, IN p_min_runtime DOUBLE)
BEGIN
    DECLARE v_now DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_left INT DEFAULT p_max_per_pass;
    DECLARE v_locked INT;
    DECLARE v_drain_all BOOLEAN;
    DECLARE v_done BOOLEAN DEFAULT FALSE;
    DECLARE w_id BIGINT;
    DECLARE w_pool VARCHAR(250);
    DECLARE w_ps INT;
    DECLARE w_pw INT;
    DECLARE w_margin INT;
    DECLARE v_free INT;
    DECLARE v_n INT;
    DECLARE v_covered INT;
    DECLARE v_reason VARCHAR(200);
    DECLARE v_lock BIGINT;
    DECLARE v_one INT;
    DECLARE v_job BIGINT;
    DECLARE v_busy BOOLEAN;
    DECLARE v_json LONGTEXT;
    DECLARE c_wait CURSOR FOR
        SELECT ti.id, ti.pool, ti.pool_slots, ti.priority_weight, p.preempt_margin
        FROM pool p
        JOIN task_instance ti ON ti.state = 'scheduled' AND ti.pool = p.name AND ti.pool_slots <= p.slots
        JOIN dag_run dr ON dr.id = ti.dag_run_id AND dr.state = 'running'
        JOIN dag d ON d.dag_id = ti.dag_id AND d.is_active
        JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id AND t.is_active
        JOIN executor ex ON ex.name = ti.executor
        WHERE p.preempt_margin IS NOT NULL AND p.slots > 0
          AND ((NOT d.is_paused AND NOT d.is_draining AND NOT v_drain_all) OR ti.next_method IS NOT NULL)
          AND NOT EXISTS (SELECT 1 FROM pool_reservation x WHERE x.ti_id = ti.id)
          AND EXISTS (SELECT 1 FROM task_instance v JOIN task vt ON vt.dag_id = v.dag_id AND vt.task_id = v.task_id
                      WHERE v.state = 'running' AND v.pool = p.name AND vt.preemptible
                        AND v.priority_weight <= ti.priority_weight - p.preempt_margin)
          AND (d.max_active_tasks IS NULL OR d.max_active_tasks >
               (SELECT COUNT(*) FROM task_instance a WHERE a.dag_run_id = ti.dag_run_id
                  AND a.state IN ('queued', 'running', 'preempting', 'deferred')))
          AND (t.max_active_tis_per_dag IS NULL OR t.max_active_tis_per_dag >
               (SELECT COUNT(*) FROM task_instance a WHERE a.dag_id = ti.dag_id AND a.task_id = ti.task_id
                  AND a.state IN ('queued', 'running', 'preempting', 'deferred')))
          AND (t.max_active_tis_per_dagrun IS NULL OR t.max_active_tis_per_dagrun >
               (SELECT COUNT(*) FROM task_instance a WHERE a.dag_run_id = ti.dag_run_id AND a.task_id = ti.task_id
                  AND a.state IN ('queued', 'running', 'preempting', 'deferred')))
          AND (ex.parallelism IS NULL OR ex.parallelism >
               (SELECT COUNT(*) FROM task_instance a WHERE a.executor = ti.executor
                  AND a.state IN ('queued', 'running', 'preempting', 'deferred')))
        ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id
        LIMIT 100;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SELECT (SELECT COUNT(*) FROM pool p WHERE p.preempt_margin IS NOT NULL)
           + (SELECT COUNT(*) FROM task_instance ti WHERE ti.state = 'preempting') INTO v_n;
    IF v_n = 0 THEN   -- preemption is off everywhere: no lock taken, nothing read
        SELECT CAST(NULL AS SIGNED) AS ti_id, CAST(NULL AS SIGNED) AS for_ti_id, CAST(NULL AS CHAR) AS reason
        FROM DUAL WHERE FALSE;
    ELSE
        SELECT COUNT(*) INTO v_locked FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE SKIP LOCKED;
        IF v_locked = 0 THEN
            SELECT COUNT(*) INTO v_locked FROM scheduler_lock l WHERE l.name = 'queue_tis';
            IF v_locked = 0 THEN
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'scheduler_lock row queue_tis is missing; run `engine db upgrade`';
            END IF;
            SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 3572,
                MESSAGE_TEXT = 'preempt_v3 is busy: another scheduler holds scheduler_lock queue_tis';
        END IF;
        SELECT COALESCE(MAX(dp.is_draining), FALSE) INTO v_drain_all FROM deployment dp;

        CREATE TEMPORARY TABLE IF NOT EXISTS preempt_v3_victim (k INT PRIMARY KEY, id BIGINT, for_id BIGINT, reason VARCHAR(200));
        CREATE TEMPORARY TABLE IF NOT EXISTS preempt_v3_out (id BIGINT PRIMARY KEY, for_id BIGINT, reason VARCHAR(200));
        DELETE FROM preempt_v3_victim;
        DELETE FROM preempt_v3_out;

        -- A victim whose worker died: its try is gone with it; back to scheduled, no retry used.
        -- Found by a plain read (READ COMMITTED: no lock), then moved by id: v1's UPDATE ... WHERE
        -- state = 'preempting' locked the index entry of EVERY preempting TI, also those a live
        -- worker's heartbeat was moving (primary record first): a deadlock.
        DELETE FROM preempt_v3_victim;
        SET v_json = NULL;
        SELECT JSON_ARRAYAGG(ti.id) INTO v_json FROM task_instance ti
        WHERE ti.state = 'preempting'
          AND NOT EXISTS (SELECT 1 FROM job j WHERE j.id = ti.worker_job_id AND j.state = 'running');
        INSERT INTO preempt_v3_victim (k, id)
        SELECT j.k, j.id FROM JSON_TABLE(COALESCE(v_json, '[]'), '$[*]' COLUMNS (k FOR ORDINALITY, id BIGINT PATH '$')) j;
        UPDATE preempt_v3_victim x STRAIGHT_JOIN task_instance ti ON ti.id = x.id
        SET ti.state = 'scheduled', ti.max_tries = ti.max_tries + 1, ti.end_date = v_now, ti.queued_at = NULL,
            ti.queued_by_job_id = NULL, ti.worker_job_id = NULL, ti.hostname = NULL, ti.updated_at = v_now
        WHERE ti.state = 'preempting'
          AND NOT EXISTS (SELECT 1 FROM job j WHERE j.id = ti.worker_job_id AND j.state = 'running');
        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        SELECT v_now, 'preempted', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, 'preempting',
               'scheduled', 'the worker of the preempted try is gone'
        FROM preempt_v3_victim x JOIN task_instance ti ON ti.id = x.id
        WHERE ti.state = 'scheduled' AND ti.end_date = v_now AND ti.updated_at = v_now AND ti.worker_job_id IS NULL;

        OPEN c_wait;
        waiting: LOOP
            FETCH c_wait INTO w_id, w_pool, w_ps, w_pw, w_margin;
            IF v_done OR v_left <= 0 THEN
                LEAVE waiting;
            END IF;
            SELECT p.slots - COALESCE((SELECT SUM(a.pool_slots) FROM task_instance a
                                       WHERE a.pool = p.name
                                         AND (a.state IN ('queued', 'running', 'preempting')
                                              OR (a.state = 'deferred' AND p.include_deferred))), 0)
                           - COALESCE((SELECT SUM(x.slots) FROM pool_reservation x WHERE x.pool = p.name), 0)
            INTO v_free FROM pool p WHERE p.name = w_pool;
            IF v_free < w_ps THEN
                DELETE FROM preempt_v3_victim;
                SET v_json = NULL;
                SELECT JSON_ARRAYAGG(JSON_ARRAY(c.k, c.id)) INTO v_json
                FROM (
                    SELECT v.id, ROW_NUMBER() OVER o AS k, SUM(v.pool_slots) OVER o - v.pool_slots AS before_k
                    FROM task_instance v
                    JOIN task vt ON vt.dag_id = v.dag_id AND vt.task_id = v.task_id AND vt.preemptible
                    WHERE v.state = 'running' AND v.pool = w_pool
                      AND v.priority_weight <= w_pw - w_margin
                      AND v.start_date <= v_now - INTERVAL ROUND(p_min_runtime * 1000000) MICROSECOND
                      AND (v.preempted_at IS NULL OR v.preempted_at <= v_now - INTERVAL ROUND(p_cooldown * 1000000) MICROSECOND)
                    WINDOW o AS (ORDER BY v.priority_weight, v.start_date DESC, v.id)
                ) c
                WHERE c.before_k < w_ps - GREATEST(v_free, 0);
                INSERT INTO preempt_v3_victim (k, id)
                SELECT j.k, j.id
                FROM JSON_TABLE(COALESCE(v_json, '[]'), '$[*]' COLUMNS (k INT PATH '$[0]', id BIGINT PATH '$[1]')) j;
                SELECT COUNT(*), COALESCE(SUM(ti.pool_slots), 0) INTO v_n, v_covered
                FROM preempt_v3_victim x JOIN task_instance ti ON ti.id = x.id;
                IF v_n > 0 AND v_n <= v_left AND v_covered >= w_ps - GREATEST(v_free, 0) THEN
                    SET v_reason = CONCAT('preempted for TI ', w_id, ' (priority ', w_pw, ')');
                    -- Row locks as a heartbeat takes them (see the header), without waiting: a victim
                    -- another transaction holds (a heartbeat) ends the pass here, before the
                    -- compare-and-set (this waiting TI and the rest wait for the next pass). So this
                    -- call never waits for a TI row while it holds others: no lock cycle with a
                    -- heartbeat, whatever order its victims come in (those of a later waiting TI may
                    -- have lower ids than those it moved for an earlier one).
                    SET v_busy = FALSE;
                    SET v_lock = (SELECT MIN(x.id) FROM preempt_v3_victim x);
                    WHILE v_lock IS NOT NULL AND NOT v_busy DO
                        -- (SELECT ... INTO: a consistent read, where v2's SET v_job = (SELECT ...) took
                        -- a shared lock on the victim's primary record before its index entry. An
                        -- aggregate: one row, NULL when the TI is gone, so NOT FOUND (c_wait's end)
                        -- never fires here.)
                        SELECT MAX(ti.worker_job_id) INTO v_job FROM task_instance ti WHERE ti.id = v_lock;
                        SELECT COUNT(*) INTO v_one FROM task_instance ti FORCE INDEX (task_instance_worker)
                        WHERE ti.worker_job_id <=> v_job AND ti.state = 'running' AND ti.id = v_lock
                        FOR UPDATE SKIP LOCKED;
                        IF v_one = 0 THEN
                            -- Not locked: no longer running (its slots are free: it is no victim any
                            -- more), or held by another transaction (still running as last committed).
                            SELECT COUNT(*) INTO v_one FROM task_instance ti
                            WHERE ti.id = v_lock AND ti.state = 'running' AND ti.worker_job_id <=> v_job;
                            SET v_busy = v_one > 0;
                            DELETE FROM preempt_v3_victim WHERE id = v_lock;
                        END IF;
                        SET v_lock = (SELECT MIN(x.id) FROM preempt_v3_victim x WHERE x.id > v_lock);
                    END WHILE;
                    IF v_busy THEN
                        SET v_left = 0;  -- nothing moved for this waiting TI; the pass ends at the next FETCH
                    ELSE
                        UPDATE preempt_v3_victim x STRAIGHT_JOIN task_instance ti ON ti.id = x.id
                        SET ti.state = 'preempting', ti.state_reason = v_reason, ti.preempted_at = v_now,
                            ti.preempted_for = w_id, ti.updated_at = v_now
                        WHERE ti.state = 'running';
                        -- (after the compare-and-set: a row only for the victims it moved)
                        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number,
                                                  from_state, to_state, reason)
                        SELECT v_now, 'preempt', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number,
                               'running', 'preempting', v_reason
                        FROM preempt_v3_victim x JOIN task_instance ti ON ti.id = x.id
                        WHERE ti.state = 'preempting' AND ti.preempted_for = w_id AND ti.preempted_at = v_now;
                        INSERT INTO pool_reservation (ti_id, pool, slots, reason, since)
                        VALUES (w_id, w_pool, w_ps, 'preemption', v_now);
                        INSERT INTO preempt_v3_out (id, for_id, reason)   -- those the compare-and-set moved
                        SELECT x.id, w_id, v_reason FROM preempt_v3_victim x JOIN task_instance ti ON ti.id = x.id
                        WHERE ti.state = 'preempting' AND ti.preempted_for = w_id AND ti.preempted_at = v_now;
                        SET v_left = v_left - v_n;
                    END IF;
                END IF;
            END IF;
        END LOOP;
        CLOSE c_wait;

        SELECT o.id AS ti_id, o.for_id AS for_ti_id, o.reason FROM preempt_v3_out o ORDER BY o.id;
    END IF;
END
