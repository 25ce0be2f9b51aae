-- fold_usage_v1(): adds the committed rows of usage_delta (what track_usage_v1 and
-- track_pool_usage_v1 append) to the usage counters and deletes them; returns how many rows it
-- folded. queue_tis_v6 calls it first; its cost follows the changes since the last fold, not
-- the size of the deployment. A row with a kind (recount_usage_v1's corrections) counts for that
-- kind of counter only; a row without one (the triggers') counts for all five. A counter that
-- falls to 0 is deleted (a missing row counts 0), so the counters hold only what is in use. Each
-- counter it touches also gets its partition's limit now (column cap: a hint for queue_tis_v6,
-- which confirms it; a limit changed since is seen there, and here at the next change).
--
-- LOCK: the CALLER holds scheduler_lock('queue_tis') (FOR UPDATE): only one fold at a time, and
-- the counters are written by nobody else. It deletes only delta rows its statement sees
-- (committed before it started); rows of transactions still open are folded by a later call.
-- INVARIANT: counters + the committed rows of usage_delta stay equal to the recount (usage_drift).
-- CALLERS MAY ASSUME: afterwards the counters equal what every transaction committed before the
-- fold's first statement holds.
CREATE OR REPLACE FUNCTION fold_usage_v1()
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    a_kind text[]; a_run bigint[]; a_dag text[]; a_task text[]; a_pool text[]; a_ex text[]; a_n int[]; a_slots int[];
BEGIN
    WITH d AS (
        DELETE FROM usage_delta x
        RETURNING x.kind, x.dag_run_id, x.dag_id, x.task_id, x.pool, x.executor, x.n, x.slots
    )
    SELECT array_agg(d.kind), array_agg(d.dag_run_id), array_agg(d.dag_id), array_agg(d.task_id), array_agg(d.pool),
           array_agg(d.executor), array_agg(d.n), array_agg(d.slots)
    INTO a_kind, a_run, a_dag, a_task, a_pool, a_ex, a_n, a_slots
    FROM d;
    IF a_n IS NULL THEN
        RETURN 0;
    END IF;
    WITH d AS (
        SELECT * FROM unnest(a_kind, a_run, a_dag, a_task, a_pool, a_ex, a_n, a_slots)
            AS x (kind, dag_run_id, dag_id, task_id, pool, executor, n, slots)
    ), p AS (
        INSERT INTO used_pool AS u (pool, slots)
        SELECT d.pool, sum(d.slots) FROM d WHERE d.kind IS NULL OR d.kind = 'pool'
        GROUP BY d.pool HAVING sum(d.slots) <> 0
        ON CONFLICT (pool) DO UPDATE SET slots = u.slots + excluded.slots
    ), r AS (
        INSERT INTO used_run AS u (dag_run_id, dag_id, n, cap)
        SELECT d.dag_run_id, min(d.dag_id), sum(d.n), (SELECT g.max_active_tasks FROM dag g WHERE g.dag_id = min(d.dag_id))
        FROM d WHERE d.kind IS NULL OR d.kind = 'run'
        GROUP BY d.dag_run_id HAVING sum(d.n) <> 0
        ON CONFLICT (dag_run_id) DO UPDATE SET n = u.n + excluded.n, cap = excluded.cap
    ), t AS (
        INSERT INTO used_task AS u (dag_id, task_id, n, cap)
        SELECT d.dag_id, d.task_id, sum(d.n),
               (SELECT k.max_active_tis_per_dag FROM task k WHERE k.dag_id = d.dag_id AND k.task_id = d.task_id)
        FROM d WHERE d.kind IS NULL OR d.kind = 'task'
        GROUP BY d.dag_id, d.task_id HAVING sum(d.n) <> 0
        ON CONFLICT (dag_id, task_id) DO UPDATE SET n = u.n + excluded.n, cap = excluded.cap
    ), m AS (
        INSERT INTO used_task_run AS u (dag_run_id, task_id, dag_id, n, cap)
        SELECT d.dag_run_id, d.task_id, min(d.dag_id), sum(d.n),
               (SELECT k.max_active_tis_per_dagrun FROM task k WHERE k.dag_id = min(d.dag_id) AND k.task_id = d.task_id)
        FROM d WHERE d.kind IS NULL OR d.kind = 'task_run'
        GROUP BY d.dag_run_id, d.task_id HAVING sum(d.n) <> 0
        ON CONFLICT (dag_run_id, task_id) DO UPDATE SET n = u.n + excluded.n, cap = excluded.cap
    )
    INSERT INTO used_executor AS u (executor, n, cap)
    SELECT d.executor, sum(d.n), (SELECT x.parallelism FROM executor x WHERE x.name = d.executor) FROM d WHERE d.kind IS NULL OR d.kind = 'executor'
        GROUP BY d.executor HAVING sum(d.n) <> 0
    ON CONFLICT (executor) DO UPDATE SET n = u.n + excluded.n, cap = excluded.cap;
    -- Counters that fell to 0, among the keys this fold touched.
    WITH p AS (
        DELETE FROM used_pool u WHERE u.slots = 0 AND u.pool = ANY (a_pool)
    ), r AS (
        DELETE FROM used_run u WHERE u.n = 0 AND u.dag_run_id = ANY (a_run)
    ), t AS (
        DELETE FROM used_task u WHERE u.n = 0 AND (u.dag_id, u.task_id) IN (SELECT * FROM unnest(a_dag, a_task))
    ), m AS (
        DELETE FROM used_task_run u WHERE u.n = 0 AND (u.dag_run_id, u.task_id) IN (SELECT * FROM unnest(a_run, a_task))
    )
    DELETE FROM used_executor u WHERE u.n = 0 AND u.executor = ANY (a_ex);
    RETURN cardinality(a_n);
END;
$$;
