-- track_usage_v1(): the trigger function that keeps the usage counters (docs/critical-section.md,
-- "Usage counters"). Statement-level AFTER INSERT, UPDATE and DELETE triggers on task_instance
-- (usage_ti_insert, usage_ti_update, usage_ti_delete; transition tables new_tis / old_tis) call
-- it, and AFTER TRUNCATE (usage_ti_truncate) empties the counters.
--
-- What a TI holds, exactly as the view limit_usage counts it: a queued, running or preempting
-- TI, or a deferred one in a pool with include_deferred, holds pool_slots of its pool and one
-- place in its run, its task, its (run, task) and its executor. Each statement appends, per
-- partition it changed, ONE row to usage_delta with the net change (what its new rows hold minus
-- what its old rows held); a statement that changes nothing held (queued -> running, a heartbeat)
-- appends nothing. The counters (used_pool, used_run, used_task, used_task_run, used_executor)
-- are only written by fold_usage_v1, under the queue_tis lock: many workers finishing at once
-- append rows, and no two of them wait on one counter row.
--
-- LOCK: none of its own (the rows it appends are new; the triggering statement holds its own).
-- INVARIANT: counters + the committed rows of usage_delta = the recount (the view
-- usage_drift shows any difference), for every change made through SQL, by any client, in any
-- transaction that commits; a rolled back statement appends nothing. TRUNCATE task_instance
-- empties the counters (they must count nothing then).
-- CALLERS MAY ASSUME: nothing; it is called by the server.
CREATE OR REPLACE FUNCTION track_usage_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM usage_delta; DELETE FROM used_pool; DELETE FROM used_run; DELETE FROM used_task;
        DELETE FROM used_task_run; DELETE FROM used_executor;
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
        SELECT t.dag_run_id, t.dag_id, t.task_id, t.pool, t.executor, count(*), sum(t.pool_slots)
        FROM new_tis t
        WHERE t.state IN ('queued', 'running', 'preempting')
           OR (t.state = 'deferred' AND EXISTS (SELECT 1 FROM pool p WHERE p.name = t.pool AND p.include_deferred))
        GROUP BY t.dag_run_id, t.dag_id, t.task_id, t.pool, t.executor;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
        SELECT t.dag_run_id, t.dag_id, t.task_id, t.pool, t.executor, -count(*), -sum(t.pool_slots)
        FROM old_tis t
        WHERE t.state IN ('queued', 'running', 'preempting')
           OR (t.state = 'deferred' AND EXISTS (SELECT 1 FROM pool p WHERE p.name = t.pool AND p.include_deferred))
        GROUP BY t.dag_run_id, t.dag_id, t.task_id, t.pool, t.executor;
    ELSE
        -- UPDATE: what the old rows held, subtracted, and what the new rows hold, added, summed
        -- per partition; partitions where nothing changed (queued -> running, a heartbeat) sum
        -- to 0 and append nothing. (No join of old and new rows: the transition tables have no
        -- index, and a nested loop over a statement of 10,000 rows is quadratic.)
        INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
        SELECT c.dag_run_id, c.dag_id, c.task_id, c.pool, c.executor, sum(c.n), sum(c.slots)
        FROM (
            SELECT t.dag_run_id, t.dag_id, t.task_id, t.pool, t.executor, -1 AS n, -t.pool_slots AS slots
            FROM old_tis t
            WHERE t.state IN ('queued', 'running', 'preempting')
               OR (t.state = 'deferred' AND EXISTS (SELECT 1 FROM pool p WHERE p.name = t.pool AND p.include_deferred))
            UNION ALL
            SELECT t.dag_run_id, t.dag_id, t.task_id, t.pool, t.executor, 1, t.pool_slots
            FROM new_tis t
            WHERE t.state IN ('queued', 'running', 'preempting')
               OR (t.state = 'deferred' AND EXISTS (SELECT 1 FROM pool p WHERE p.name = t.pool AND p.include_deferred))
        ) c
        GROUP BY c.dag_run_id, c.dag_id, c.task_id, c.pool, c.executor
        HAVING sum(c.n) <> 0 OR sum(c.slots) <> 0;
    END IF;
    RETURN NULL;
END;
$$;
