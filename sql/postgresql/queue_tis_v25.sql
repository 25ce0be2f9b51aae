-- queue_tis_v25(max_tis, job_id, now, page_factor): on PostgreSQL queue_tis_v23, which it calls,
-- with the planner's merge joins off for the call (read sql/postgresql/queue_tis_v23.sql, and
-- sql/postgresql/queue_tis_v11.sql for the contract). It decides exactly what v23 decides.
--
-- Why: v23's scratch tables are temporary and never analyzed, so the planner guesses their
-- distinct values. For step 3b (the candidates: every page row joined to its group by pool, run,
-- task, width and executor) the guess made a hash join look dearer than a merge join, and the
-- merge join sorts every page row and every group by those five keys (four of them text) before
-- the sort the window needs anyway. No statement of v23 is planned as a merge join otherwise
-- (auto_explain of the drains of 100,000 and 1,000,000: step 3b only). With merge joins off, 3b
-- hashes the batch's groups and probes them once per page row.
-- Measured as this text under another number against v24 (loadtests/baselines/commit_ab.py, every
-- call committed, calls alternating): drain of 1,000,000 at max_tis 512 0.865 call by call
-- (p50 196.5 -> 161.0 ms), of 100,000 0.954, small passes 0.981, 5,000 blocked 0.984.
--
-- The setting holds for the call and every statement v23 runs inside it; PostgreSQL plans a
-- PL/pgSQL statement once per session and may keep that plan, so a session that called v23 or
-- v24 before may keep their plans (a scheduler's session calls one version).
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v23 (scheduler_lock('queue_tis'), FOR
-- UPDATE NOWAIT: SQLSTATE 55P03 at once when another scheduler holds it; no limit is exceeded, a
-- TI is queued once).
CREATE OR REPLACE FUNCTION queue_tis_v25(p_max_tis int, p_job_id bigint DEFAULT NULL,
                                        p_now timestamptz DEFAULT NULL, p_page_factor int DEFAULT 2)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int,
               try_number int, pool text, queue text, executor text, priority_weight int)
LANGUAGE plpgsql
SET jit = off
SET enable_mergejoin = off
AS $$
BEGIN
    RETURN QUERY SELECT * FROM queue_tis_v23(p_max_tis, p_job_id, p_now, p_page_factor);
END;
$$;
