-- fire_trigger_v2(trigger_id, event, error, now, boost): a trigger ended; the database decides
-- what happens to its deferred TI and returns the TI's new state (NULL: the trigger had already
-- fired, or its TI no longer waits on it; the trigger is marked fired either way).
--   error NULL, pool with include_deferred -> `queued` at once: the TI kept its place in every
--                      limit while deferred (limit_usage), so queuing it adds to no count and it
--                      never competes in queue_tis again;
--   error NULL, other pools                -> `scheduled` with priority_weight = its task's
--                      priority_weight + boost (setting resume_priority_boost; not cumulative
--                      over several deferrals): queue_tis takes it ahead of new work of
--                      the same pool, as soon as a slot is free;
--   error set (the trigger raised, or its timeout passed) -> the try fails through
--                      finish_ti_v2 (up_for_retry while retries remain, else failed; history).
-- Paused and draining DAGs resume too: the resume path never looks at is_paused/is_draining.
-- next_method/next_kwargs stay set until a worker claims the resume (claim_tis_v1); on the
-- failure path they are cleared, so a retry starts from the beginning.
--
-- Lock: the trigger row, then the task_instance row, FOR UPDATE (always in that order).
-- Invariant: a trigger fires once (compare-and-set on fired_at IS NULL); a TI resumes once
-- per deferral (compare-and-set on state 'deferred' and trigger_id). No limit's usage grows.
-- Callers may assume: calling it twice, or for a trigger nobody waits on, is harmless; no
-- event, error or stored value makes it raise.
--
-- New in v2: the event is JSON text, checked here: text that is not valid JSON (NaN,
-- Infinity, a raw control character, not JSON at all) fires the trigger with an error instead
-- ("the trigger's event is not plain JSON"), so the try fails with that reason and nothing else
-- does. The error text loses its NUL characters and is cut to 4,000 characters. The failure
-- path goes through finish_ti_v2 (the retry delay is clamped), and the boosted priority is
-- clamped to the int range on both sides.
-- MySQL: a FUNCTION that modifies data (see heartbeat_v1 about binary logging); no parameter
-- defaults (the named query passes boost); `trigger` is a reserved word (quoted). The row
-- lookups use aggregates (always one row) rather than NOT FOUND, and no subquery sits in an IF
-- or SET (MariaDB reads those with shared locks). The new priority is computed
-- in BIGINT arithmetic (MySQL's), capped like PostgreSQL's. The event and error are LONGTEXT
-- parameters: a JSON parameter would refuse bad JSON before the body runs.
CREATE FUNCTION fire_trigger_v2(p_trigger_id BIGINT, p_event LONGTEXT, p_error LONGTEXT, p_now DATETIME(6),
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

    -- A plain SELECT ... INTO: a subquery inside IF would take a shared lock on the pool row.
    SELECT COALESCE(MAX(p.include_deferred), FALSE) INTO v_keeps FROM pool p WHERE p.name = v_pool;
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
