-- claim_tis_v1(job_id, hostname, queues, limit, log_dir, now): a worker of the database-queue
-- executor ('default') takes up to `limit` queued TIs of its queues, highest priority first,
-- and starts a new try of each: state `running`, try_number + 1, owner and log path stamped.
--
-- Lock: the claimed task_instance rows, FOR UPDATE SKIP LOCKED: workers never wait for each
-- other and never take the same TI (a TI claimed by one is invisible to the others).
-- Invariant: queued -> running only; the TI keeps its pool slot (both states count).
-- Callers may assume: every returned row is theirs to run, with try_number as the try to
-- report to finish_ti_v1.
CREATE OR REPLACE FUNCTION claim_tis_v1(p_job_id bigint, p_hostname text, p_queues text[], p_limit int,
                                        p_log_dir text, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int, try_number int,
               kind text, bash_command text, env jsonb, python_callable text, op_kwargs jsonb,
               map_args jsonb, execution_timeout double precision, fileloc text, log_path text, conf jsonb)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
BEGIN
    RETURN QUERY
    WITH claimed AS (
        SELECT ti.id
        FROM task_instance ti
        WHERE ti.state = 'queued' AND ti.queue = ANY (p_queues) AND ti.executor = 'default'
        ORDER BY ti.priority_weight DESC, ti.queued_at, ti.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE task_instance ti
    SET state = 'running',
        try_number = ti.try_number + 1,
        start_date = v_now,
        end_date = NULL,
        exit_code = NULL,
        worker_job_id = p_job_id,
        hostname = p_hostname,
        last_heartbeat_at = v_now,
        updated_at = v_now,
        log_path = p_log_dir || '/dag_id=' || ti.dag_id || '/run_id=' || ti.run_id || '/task_id=' || ti.task_id
                   || CASE WHEN ti.map_index >= 0 THEN '/map_index=' || ti.map_index ELSE '' END
                   || '/attempt=' || (ti.try_number + 1) || '.log'
    FROM claimed c, task t, dag_run r, dag d
    WHERE ti.id = c.id AND ti.state = 'queued'
      AND t.dag_id = ti.dag_id AND t.task_id = ti.task_id
      AND r.id = ti.dag_run_id AND d.dag_id = ti.dag_id
    RETURNING ti.id, ti.dag_id::text, ti.run_id::text, ti.task_id::text, ti.map_index, ti.try_number,
              t.kind::text, t.bash_command, t.env, t.python_callable, t.op_kwargs,
              CASE WHEN t.expand IS NULL THEN NULL
                   ELSE (SELECT jsonb_object_agg(e.key, e.value -> ti.map_index) FROM jsonb_each(t.expand) e)
              END,
              t.execution_timeout, d.fileloc, ti.log_path, r.conf;
END;
$$;
