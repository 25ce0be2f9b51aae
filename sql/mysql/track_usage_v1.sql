-- track_usage_v1(old..., new...): keeps the usage counters (docs/critical-section.md, "Usage
-- counters"); the MySQL/MariaDB side of sql/postgresql/track_usage_v1.sql, whose contract it
-- keeps. Row-level AFTER INSERT, UPDATE and DELETE triggers on task_instance (usage_ti_insert,
-- usage_ti_update, usage_ti_delete) call it with the old and the new row's state, keys and
-- pool_slots (NULLs for the side that does not exist). A row that held (queued, running,
-- preempting, or deferred in a pool with include_deferred) and no longer holds, or moved to
-- another partition, appends -1 (and -pool_slots) for its old partition to usage_delta; one that
-- holds now, +1 for its new one; a change that keeps what it holds appends nothing.
-- MySQL/MariaDB run no trigger on TRUNCATE: after a TRUNCATE of task_instance call
-- recount_usage_v1 (`engine db check --repair`).
-- LOCK: none of its own. INVARIANT: counters + committed usage_delta rows = the recount
-- (usage_drift). CALLERS MAY ASSUME: nothing; the server calls it.
CREATE PROCEDURE track_usage_v1(
    IN o_state VARCHAR(20), IN o_run BIGINT, IN o_dag VARCHAR(250), IN o_task VARCHAR(250), IN o_pool VARCHAR(250),
    IN o_ex VARCHAR(250), IN o_slots INT,
    IN n_state VARCHAR(20), IN n_run BIGINT, IN n_dag VARCHAR(250), IN n_task VARCHAR(250), IN n_pool VARCHAR(250),
    IN n_ex VARCHAR(250), IN n_slots INT)
BEGIN
    DECLARE o_holds BOOLEAN DEFAULT COALESCE(o_state IN ('queued', 'running', 'preempting'), FALSE);
    DECLARE n_holds BOOLEAN DEFAULT COALESCE(n_state IN ('queued', 'running', 'preempting'), FALSE);
    IF o_state = 'deferred' THEN
        SET o_holds = EXISTS (SELECT 1 FROM pool p WHERE p.name = o_pool AND p.include_deferred);
    END IF;
    IF n_state = 'deferred' THEN
        SET n_holds = EXISTS (SELECT 1 FROM pool p WHERE p.name = n_pool AND p.include_deferred);
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
