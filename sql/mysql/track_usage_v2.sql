-- track_usage_v2(old..., new...): on MySQL/MariaDB, what the triggers usage_ti_insert and
-- usage_ti_delete (AFTER INSERT / DELETE ON task_instance FOR EACH ROW; revision 0044) call for a
-- row that may hold. track_usage_v1 (read sql/mysql/track_usage_v1.sql for the contract) with one
-- change, a fix: A DEFERRED ROW READS ITS POOL'S include_deferred WITH A LOCKING READ, which waits
-- for a flag change in flight and then reads the committed flag, and holds the pool row shared
-- until the writer commits, so a flag change waits for the writer (track_pool_usage_v2: v1's
-- plain read could take the old flag while the change's count missed the row, and the counters
-- drifted). usage_ti_update holds the same rule inline.
-- LOCK: for a deferred old or new row, its pool's row, shared, until commit (a pool's UPDATE
-- waits for it; it waits for an UPDATE of that pool). INVARIANT: counters + committed usage_delta
-- rows = the recount (usage_drift). CALLERS MAY ASSUME: nothing; the server calls it.
CREATE PROCEDURE track_usage_v2(
    IN o_state VARCHAR(20), IN o_run BIGINT, IN o_dag VARCHAR(250), IN o_task VARCHAR(250), IN o_pool VARCHAR(250),
    IN o_ex VARCHAR(250), IN o_slots INT,
    IN n_state VARCHAR(20), IN n_run BIGINT, IN n_dag VARCHAR(250), IN n_task VARCHAR(250), IN n_pool VARCHAR(250),
    IN n_ex VARCHAR(250), IN n_slots INT)
BEGIN
    DECLARE o_holds BOOLEAN DEFAULT COALESCE(o_state IN ('queued', 'running', 'preempting'), FALSE);
    DECLARE n_holds BOOLEAN DEFAULT COALESCE(n_state IN ('queued', 'running', 'preempting'), FALSE);
    -- (An aggregate: a row even for an unknown pool, so NOT FOUND never fires.)
    IF o_state = 'deferred' THEN
        SELECT COALESCE(MAX(p.include_deferred), FALSE) INTO o_holds FROM pool p WHERE p.name = o_pool
        LOCK IN SHARE MODE;
    END IF;
    IF n_state = 'deferred' THEN
        SELECT COALESCE(MAX(p.include_deferred), FALSE) INTO n_holds FROM pool p WHERE p.name = n_pool
        LOCK IN SHARE MODE;
    END IF;
    IF NOT (o_holds AND n_holds AND o_run <=> n_run AND o_dag <=> n_dag AND o_task <=> n_task
            AND o_pool <=> n_pool AND o_ex <=> n_ex AND o_slots <=> n_slots) THEN
        IF o_holds THEN
            INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
            VALUES (o_run, o_dag, o_task, o_pool, o_ex, -1, -o_slots);
        END IF;
        IF n_holds THEN
            INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
            VALUES (n_run, n_dag, n_task, n_pool, n_ex, 1, n_slots);
        END IF;
    END IF;
END
