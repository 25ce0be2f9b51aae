-- fire_trigger_v3(trigger_id, event, error, now, boost): fire_trigger_v2 (read
-- sql/mysql/fire_trigger_v2.sql: the same arguments, result and meaning) with one change, a fix:
-- THE RESUME READS ITS POOL'S include_deferred BY A LOCKING READ.
--   v2 read the flag by a plain read, which in a stored FUNCTION uses the read view of the
--   calling statement, made at its first plain read: send_event_v1 firing several triggers made
--   it while firing the first, then waited for a later TI's row, held by a change of that TI's
--   pool's include_deferred (track_pool_usage_v2 locks the pool's deferred TIs); after the change
--   committed, the old flag was read from that view and the TI was queued "keeping its slot" the
--   change had freed (and given to another TI): past the pool's limit (tests/test_deferral.py,
--   "a resume racing a change of its pool's include_deferred"). A locking read sees the last
--   committed flag, and holds the pool row shared until commit, as the usage trigger does when
--   the TI leaves `deferred` (no new lock order).
--
-- Returns the TI's new state: `queued` (pool with include_deferred: it kept its place in every
-- limit), `scheduled` (other pools, priority_weight = task's + boost), or through finish_ti_v2
-- `up_for_retry` / `failed` (error set); NULL when the trigger had already fired or its TI no
-- longer waits on it (the trigger is marked fired either way).
--
-- Lock: the trigger row, then the task_instance row, FOR UPDATE (always in that order), then the
-- TI's pool row shared (LOCK IN SHARE MODE; a change of its include_deferred waits, or deadlocks
-- with this call as it does with any TI leaving `deferred`: InnoDB rolls one back, 1213).
-- Invariant: a trigger fires once (compare-and-set on fired_at IS NULL); a TI resumes once per
-- deferral (compare-and-set on state 'deferred' and trigger_id). No limit's usage grows: a TI
-- goes `queued` only when its pool counts deferred TIs as last committed.
-- Callers may assume: calling it twice, or for a trigger nobody waits on, is harmless; no event,
-- error or stored value makes it raise.
-- MySQL: as fire_trigger_v2 (a FUNCTION that modifies data, LONGTEXT event and error, aggregates
-- for one-row lookups, BIGINT arithmetic for the boosted priority).
CREATE FUNCTION fire_trigger_v3(p_trigger_id BIGINT, p_event LONGTEXT, p_error LONGTEXT, p_now DATETIME(6),
                                p_boost INT)
RETURNS VARCHAR(20)
NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    DECLARE v_now     DATETIME(6) DEFAULT COALESCE(p_now, UTC_TIMESTAMP(6));
    DECLARE v_found   INT;
    DECLARE v_ti      BIGINT;
    DECLARE v_id      BIGINT;
    DECLARE v_try     INT;
    DECLARE v_dag_id  VARCHAR(250);
    DECLARE v_task_id VARCHAR(250);
    DECLARE v_pool    VARCHAR(250);
    DECLARE v_keeps   BOOLEAN;
    DECLARE v_event   LONGTEXT DEFAULT p_event;
    DECLARE v_error   TEXT DEFAULT LEFT(REPLACE(p_error, CHAR(0 USING utf8mb4), ''), 4000);

    IF p_event IS NOT NULL AND NOT JSON_VALID(p_event) THEN
        SET v_event = NULL;
        SET v_error = LEFT(CONCAT(COALESCE(CONCAT(v_error, '; '), ''), 'the trigger''s event is not plain JSON'), 4000);
    END IF;

    SELECT COUNT(*), MAX(g.ti_id) INTO v_found, v_ti
    FROM `trigger` g WHERE g.id = p_trigger_id AND g.fired_at IS NULL FOR UPDATE;
    IF v_found = 0 THEN
        RETURN NULL;
    END IF;
    UPDATE `trigger` SET fired_at = v_now, event = v_event, error = v_error WHERE id = p_trigger_id;

    SELECT COUNT(*), MAX(ti.id), MAX(ti.try_number), MAX(ti.dag_id), MAX(ti.task_id), MAX(ti.pool)
    INTO v_found, v_id, v_try, v_dag_id, v_task_id, v_pool
    FROM task_instance ti
    WHERE ti.id = v_ti AND ti.state = 'deferred' AND ti.trigger_id = p_trigger_id
    FOR UPDATE;
    IF v_found = 0 THEN
        RETURN NULL;
    END IF;

    IF v_error IS NOT NULL THEN
        UPDATE task_instance SET state = 'running', next_method = NULL, next_kwargs = NULL WHERE id = v_id;
        RETURN finish_ti_v2(v_id, v_try, NULL, FALSE, v_error, v_now);
    END IF;

    -- A locking read: the flag as last committed (a plain read would use the caller's read view).
    -- The usage trigger takes the same shared lock when the TI leaves `deferred` below.
    SELECT COALESCE(MAX(p.include_deferred), FALSE) INTO v_keeps FROM pool p WHERE p.name = v_pool LOCK IN SHARE MODE;
    IF v_keeps THEN
        UPDATE task_instance
        SET state = 'queued', queued_at = v_now, queued_by_job_id = NULL, updated_at = v_now,
            state_reason = 'resumed: trigger fired; kept its slot'
        WHERE id = v_id;
        RETURN 'queued';
    END IF;
    UPDATE task_instance ti
    SET ti.priority_weight = GREATEST(LEAST(COALESCE((SELECT t.priority_weight FROM task t
                                                      WHERE t.dag_id = v_dag_id AND t.task_id = v_task_id),
                                                     ti.priority_weight) + COALESCE(p_boost, 0), 2147483647),
                                      -2147483648),
        ti.state = 'scheduled', ti.queued_at = NULL, ti.queued_by_job_id = NULL, ti.updated_at = v_now,
        ti.state_reason = CONCAT('resumed: trigger fired; waits for a slot with priority boost ', COALESCE(p_boost, 0))
    WHERE ti.id = v_id;
    RETURN 'scheduled';
END
