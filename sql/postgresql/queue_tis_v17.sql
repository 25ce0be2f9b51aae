-- queue_tis_v17(max_tis, job_id, now, page_factor): on PostgreSQL exactly queue_tis_v15, which it
-- calls (then v14, then v11: read sql/postgresql/queue_tis_v11.sql for the contract); v16 is v15
-- too. The version exists for MySQL/MariaDB, whose queue_tis_v17 appends the final UPDATE's usage
-- in one statement and keeps its scratch tables in Aria (PostgreSQL's statement trigger on
-- task_instance already appends one statement's usage at once). Both dialects name the same
-- procedures, and the named query `queue_tis` calls v17 on both.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v14 (no lock when there is nothing to
-- decide; otherwise scheduler_lock('queue_tis'), FOR UPDATE NOWAIT: SQLSTATE 55P03 at once when
-- another scheduler holds it).
CREATE OR REPLACE FUNCTION queue_tis_v17(p_max_tis int, p_job_id bigint DEFAULT NULL,
                                        p_now timestamptz DEFAULT NULL, p_page_factor int DEFAULT 2)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int,
               try_number int, pool text, queue text, executor text, priority_weight int)
LANGUAGE plpgsql
SET jit = off
AS $$
BEGIN
    RETURN QUERY SELECT * FROM queue_tis_v15(p_max_tis, p_job_id, p_now, p_page_factor);
END;
$$;
