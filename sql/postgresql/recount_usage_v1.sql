-- recount_usage_v1(): repairs the usage counters: appends to usage_delta, per partition where
-- usage_drift shows a difference, one correction row (its kind, its key, recounted - counted);
-- returns how many. The next fold (queue_tis_v6) adds them in. `engine db check --repair` calls
-- it; after a TRUNCATE or a bulk load that bypassed the triggers (MySQL/MariaDB run no trigger on
-- TRUNCATE), call it once.
--
-- LOCK: none. It never writes a counter: its corrections are appended in ONE statement, whose
-- snapshot sees counters, pending deltas and TIs at one instant, so what transactions commit
-- after that instant (their own delta rows) stays exact on top of it.
-- INVARIANT: after it commits, counters + committed deltas = the recount (usage_drift is empty)
-- as of its snapshot, and stays so.
-- CALLERS MAY ASSUME: nothing but usage_delta changed.
CREATE OR REPLACE FUNCTION recount_usage_v1()
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_n int;
BEGIN
    INSERT INTO usage_delta (kind, dag_run_id, dag_id, task_id, pool, executor, n, slots)
    SELECT u.kind, u.dag_run_id, u.dag_id, u.task_id, u.pool, u.executor,
           CASE WHEN u.kind = 'pool' THEN 0 ELSE u.recounted - u.counted END,
           CASE WHEN u.kind = 'pool' THEN u.recounted - u.counted ELSE 0 END
    FROM usage_drift u;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;
