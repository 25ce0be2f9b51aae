-- queue_tis_v27(max_tis, job_id, now, page_factor): on PostgreSQL exactly queue_tis_v25, which it
-- calls (read sql/postgresql/queue_tis_v25.sql), as queue_tis_v26 does. The version exists for
-- MySQL/MariaDB, whose queue_tis_v27 runs v26 with aging off and, with aging on, v9's walk with a
-- fold that waits for no writer (fold_usage_v2). Both dialects name the same procedures, and the
-- named query `queue_tis` calls v27 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v25, i.e. of queue_tis_v23
-- (scheduler_lock('queue_tis'), FOR UPDATE NOWAIT: SQLSTATE 55P03 at once when another scheduler
-- holds it; no limit is exceeded, a TI is queued once).
CREATE OR REPLACE FUNCTION queue_tis_v27(p_max_tis int, p_job_id bigint DEFAULT NULL,
                                        p_now timestamptz DEFAULT NULL, p_page_factor int DEFAULT 2)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int,
               try_number int, pool text, queue text, executor text, priority_weight int)
LANGUAGE plpgsql
SET jit = off
AS $$
BEGIN
    RETURN QUERY SELECT * FROM queue_tis_v25(p_max_tis, p_job_id, p_now, p_page_factor);
END;
$$;
