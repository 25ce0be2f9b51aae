-- preempt_v2 (MySQL/MariaDB): preempt_v1 that locks its victims the way a worker's heartbeat
-- (heartbeat_v3) locks its TIs, before moving them. The heartbeat's UPDATE ... WHERE
-- worker_job_id = ? AND state = 'running' walks the index task_instance_worker (worker_job_id,
-- state; InnoDB ends its entries with the id): it locks each row's index entry, THEN its
-- primary-key record, in id order. preempt_v1 moved the victims through a join on the primary
-- key (primary record first, then the index entry its new state rewrites), in victim order:
-- each could hold one lock of a row the other wanted (seen in SHOW ENGINE INNODB STATUS:
-- preempt_v1's UPDATE waiting for an entry of task_instance_worker, the heartbeat's UPDATE
-- for the PRIMARY record), MariaDB broke the deadlock (error 1213) and both retried later.
-- preempt_v2 locks each victim through task_instance_worker (FORCE INDEX, entry then record),
-- in id order, one at a time; and finds the preempting TIs of dead workers by a plain read
-- before it moves them by id (v1's UPDATE ... WHERE state = 'preempting' locked the index
-- entry of every preempting TI, also of one a live worker's heartbeat was moving back to
-- `scheduled`, primary record first: the other deadlock seen). Rows of task_instance are read
-- only by plain SELECTs (READ COMMITTED: consistent, no lock) into variables: v1's INSERT ...
-- SELECT FROM task_instance into its temporary tables took shared locks on every row it read
-- (the pool's running TIs), so a later waiting TI's victim search could wait for a heartbeat
-- that waited for an earlier victim's index entry (the third cycle seen). The ids travel as a
-- JSON array (JSON_ARRAYAGG, read back with JSON_TABLE). Everything else is v1's.
-- Same arguments and result as v1. v1's description follows.
-- preempt_v2(now, cooldown, max_per_pass, min_runtime): preemption. The contract, the choice of
-- waiting TIs and victims, the lock and the invariant are those of sql/postgresql/preempt_v2.sql
-- (read its header): victims become `preempting` (state_reason, preempted_at, preempted_for, a
-- state_change row each), the waiting TI gets a 'preemption' reservation in pool_reservation.
-- Returns one row per victim: (ti_id, for_ti_id, reason).
--
-- LOCK: scheduler_lock('queue_tis'), held until commit, taken FOR UPDATE SKIP LOCKED (MariaDB
-- refuses NOWAIT in a procedure): error 3572 ER_LOCK_NOWAIT at once when another scheduler
-- holds it. INVARIANT and CALLERS MAY ASSUME: as on PostgreSQL.
-- MySQL differences: a cursor over the waiting TIs, the victims of one waiting TI in a temporary
-- table instead of an array, CONCAT for format().
CREATE PROCEDURE preempt_v2(IN p_now DATETIME(6), IN p_cooldown DOUBLE, IN p_max_per_pass INT, IN p_min_runtime DOUBLE)
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
                MESSAGE_TEXT = 'preempt_v2 is busy: another scheduler holds scheduler_lock queue_tis';
        END IF;
        SELECT COALESCE(MAX(dp.is_draining), FALSE) INTO v_drain_all FROM deployment dp;

        CREATE TEMPORARY TABLE IF NOT EXISTS preempt_v2_victim (k INT PRIMARY KEY, id BIGINT, for_id BIGINT, reason VARCHAR(200));
        CREATE TEMPORARY TABLE IF NOT EXISTS preempt_v2_out (id BIGINT PRIMARY KEY, for_id BIGINT, reason VARCHAR(200));
        DELETE FROM preempt_v2_victim;
        DELETE FROM preempt_v2_out;

        -- A victim whose worker died: its try is gone with it; back to scheduled, no retry used.
        -- Found by a plain read (READ COMMITTED: no lock), then moved by id: v1's UPDATE ... WHERE
        -- state = 'preempting' locked the index entry of EVERY preempting TI, also those a live
        -- worker's heartbeat was moving (primary record first): a deadlock.
        DELETE FROM preempt_v2_victim;
        SET v_json = NULL;
        SELECT JSON_ARRAYAGG(ti.id) INTO v_json FROM task_instance ti
        WHERE ti.state = 'preempting'
          AND NOT EXISTS (SELECT 1 FROM job j WHERE j.id = ti.worker_job_id AND j.state = 'running');
        INSERT INTO preempt_v2_victim (k, id)
        SELECT j.k, j.id FROM JSON_TABLE(COALESCE(v_json, '[]'), '$[*]' COLUMNS (k FOR ORDINALITY, id BIGINT PATH '$')) j;
        UPDATE preempt_v2_victim x STRAIGHT_JOIN task_instance ti ON ti.id = x.id
        SET ti.state = 'scheduled', ti.max_tries = ti.max_tries + 1, ti.end_date = v_now, ti.queued_at = NULL,
            ti.queued_by_job_id = NULL, ti.worker_job_id = NULL, ti.hostname = NULL, ti.updated_at = v_now
        WHERE ti.state = 'preempting'
          AND NOT EXISTS (SELECT 1 FROM job j WHERE j.id = ti.worker_job_id AND j.state = 'running');
        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        SELECT v_now, 'preempted', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number, 'preempting',
               'scheduled', 'the worker of the preempted try is gone'
        FROM preempt_v2_victim x JOIN task_instance ti ON ti.id = x.id
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
                DELETE FROM preempt_v2_victim;
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
                INSERT INTO preempt_v2_victim (k, id)
                SELECT j.k, j.id
                FROM JSON_TABLE(COALESCE(v_json, '[]'), '$[*]' COLUMNS (k INT PATH '$[0]', id BIGINT PATH '$[1]')) j;
                SELECT COUNT(*), COALESCE(SUM(ti.pool_slots), 0) INTO v_n, v_covered
                FROM preempt_v2_victim x JOIN task_instance ti ON ti.id = x.id;
                IF v_n > 0 AND v_n <= v_left AND v_covered >= w_ps - GREATEST(v_free, 0) THEN
                    SET v_reason = CONCAT('preempted for TI ', w_id, ' (priority ', w_pw, ')');
                    -- Row locks as a heartbeat takes them (see the header), then the compare-and-set.
                    SET v_lock = (SELECT MIN(x.id) FROM preempt_v2_victim x);
                    WHILE v_lock IS NOT NULL DO
                        SET v_job = (SELECT ti.worker_job_id FROM task_instance ti WHERE ti.id = v_lock);
                        SELECT COUNT(*) INTO v_one FROM task_instance ti FORCE INDEX (task_instance_worker)
                        WHERE ti.worker_job_id <=> v_job AND ti.state = 'running' AND ti.id = v_lock FOR UPDATE;
                        SET v_lock = (SELECT MIN(x.id) FROM preempt_v2_victim x WHERE x.id > v_lock);
                    END WHILE;
                    UPDATE preempt_v2_victim x STRAIGHT_JOIN task_instance ti ON ti.id = x.id
                    SET ti.state = 'preempting', ti.state_reason = v_reason, ti.preempted_at = v_now,
                        ti.preempted_for = w_id, ti.updated_at = v_now
                    WHERE ti.state = 'running';
                    -- (after the compare-and-set: a row only for the victims it moved)
                    INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number,
                                              from_state, to_state, reason)
                    SELECT v_now, 'preempt', ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.id, ti.try_number,
                           'running', 'preempting', v_reason
                    FROM preempt_v2_victim x JOIN task_instance ti ON ti.id = x.id
                    WHERE ti.state = 'preempting' AND ti.preempted_for = w_id AND ti.preempted_at = v_now;
                    INSERT INTO pool_reservation (ti_id, pool, slots, reason, since)
                    VALUES (w_id, w_pool, w_ps, 'preemption', v_now);
                    INSERT INTO preempt_v2_out (id, for_id, reason)   -- those the compare-and-set moved
                    SELECT x.id, w_id, v_reason FROM preempt_v2_victim x JOIN task_instance ti ON ti.id = x.id
                    WHERE ti.state = 'preempting' AND ti.preempted_for = w_id AND ti.preempted_at = v_now;
                    SET v_left = v_left - v_n;
                END IF;
            END IF;
        END LOOP;
        CLOSE c_wait;

        SELECT o.id AS ti_id, o.for_id AS for_ti_id, o.reason FROM preempt_v2_out o ORDER BY o.id;
    END IF;
END
