-- claim_tis_v5(job_id, hostname, queues, limit, log_dir, now): claim_tis_v4 (read
-- sql/postgresql/claim_tis_v4.sql and claim_tis_v3.sql for the contract, lock and invariant) whose
-- question asks for a queued TI of the database-queue executor ('default'), not of any executor.
-- Revision 0041 put the executor into the claim index (state, queue, executor, priority_weight
-- DESC, queued_at, id), so the question is one probe per queue name, and claim_tis_v3's read of a
-- queue starts at its first 'default' TI. Before it, a queue holding another executor's queued TIs
-- (a Celery backlog waiting for Celery workers) cost every claim of a database-queue worker of that
-- queue a read of each of them: ~8 ms a poll with 10,000 Celery TIs queued, even when the queue held
-- nothing for it (v4 entered v3 for them).
-- LOCK, INVARIANT, CALLERS MAY ASSUME: claim_tis_v3's; an idle call (no 'default' TI queued in the
-- worker's queues) takes no lock and writes nothing.
CREATE OR REPLACE FUNCTION claim_tis_v5(p_job_id bigint, p_hostname text, p_queues text[], p_limit int,
                                        p_log_dir text, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int, try_number int,
               kind text, bash_command text, env jsonb, python_callable text, op_kwargs jsonb,
               map_args jsonb, execution_timeout double precision, fileloc text, log_path text, conf jsonb,
               next_method text, next_kwargs jsonb, event jsonb)
LANGUAGE plpgsql
AS $$
BEGIN
    -- One probe of task_instance_claim per queue name (as in v4: not `queue = ANY (p_queues)`).
    IF NOT EXISTS (SELECT 1 FROM unnest(p_queues) q (name)
                   WHERE EXISTS (SELECT 1 FROM task_instance x
                                 WHERE x.state = 'queued' AND x.queue = q.name AND x.executor = 'default')) THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM claim_tis_v3(p_job_id, p_hostname, p_queues, p_limit, p_log_dir, p_now);
END;
$$;
