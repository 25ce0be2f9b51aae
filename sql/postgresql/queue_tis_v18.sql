-- queue_tis_v18(max_tis, job_id, now, page_factor): on PostgreSQL exactly queue_tis_v17, which it
-- calls (then v15, v14 and v11: read sql/postgresql/queue_tis_v11.sql for the contract). The
-- version exists for MySQL/MariaDB, whose queue_tis_v18 takes a pool's gate row before it reads
-- the TIs of a new skip entry again (a writer committing in between could be hidden by the entry
-- there); PostgreSQL's entries compare the writers' transaction ids with the call's snapshot and
-- take no gate. Both dialects name the same procedures, and the named query `queue_tis` calls
-- v18 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v14 (no lock when there is nothing to
-- decide; otherwise scheduler_lock('queue_tis'), FOR UPDATE NOWAIT: SQLSTATE 55P03 at once when
-- another scheduler holds it).
CREATE OR REPLACE FUNCTION queue_tis_v18(p_max_tis int, p_job_id bigint DEFAULT NULL,
                                        p_now timestamptz DEFAULT NULL, p_page_factor int DEFAULT 2)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int,
               try_number int, pool text, queue text, executor text, priority_weight int)
LANGUAGE plpgsql
SET jit = off
AS $$
BEGIN
    RETURN QUERY SELECT * FROM queue_tis_v17(p_max_tis, p_job_id, p_now, p_page_factor);
END;
$$;
