-- start_ti_v1(ti_id, token, job_id, hostname, log_dir, now): a worker of a dispatching executor
-- (e.g. a Celery worker) received the message (ti_id, token) sent by dispatch_tis_v1 and
-- starts the try, as claim_tis_v2 does for the database queue: state `running`, try_number + 1
-- (a resume continues its try), owner job, heartbeat and log path stamped; the TI's
-- ti_dispatch row is deleted. It starts only if the TI is still `queued`, in the queued period
-- the message was sent for, and `token` is the TI's current dispatch token. A late, duplicate
-- or redelivered message (the try already started, the TI was re-sent with a new token,
-- requeued, cleared, cancelled) returns no row and changes nothing: the caller drops it.
--
-- Lock: the task_instance row, FOR UPDATE (waits for a concurrent start of the same TI, which
-- then leaves it `running`: the second start sees that and returns nothing), then its
-- ti_dispatch row (deleted).
-- Invariant: queued -> running only, for the current token only, so at most one try of a
-- queued period ever starts however often its messages are delivered; the TI keeps its slots.
-- Callers may assume: a returned row is theirs to run and report exactly as a row of
-- claim_tis_v2 (same columns; try_number is the try to report to finish_ti / defer_ti);
-- log_path is under p_log_dir whatever the ids hold.
CREATE OR REPLACE FUNCTION start_ti_v1(p_ti_id bigint, p_token text, p_job_id bigint, p_hostname text,
                                       p_log_dir text, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int, try_number int,
               kind text, bash_command text, env jsonb, python_callable text, op_kwargs jsonb,
               map_args jsonb, execution_timeout double precision, fileloc text, log_path text, conf jsonb,
               next_method text, next_kwargs jsonb, event jsonb)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_method text;
    v_kwargs jsonb;
    v_trigger bigint;
BEGIN
    SELECT ti.next_method, ti.next_kwargs, ti.trigger_id INTO v_method, v_kwargs, v_trigger
    FROM task_instance ti
    JOIN ti_dispatch d ON d.ti_id = ti.id
    WHERE ti.id = p_ti_id AND ti.state = 'queued' AND d.token = p_token
      AND d.queued_at IS NOT DISTINCT FROM ti.queued_at
    FOR UPDATE OF ti;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    DELETE FROM ti_dispatch d WHERE d.ti_id = p_ti_id;
    RETURN QUERY
    UPDATE task_instance ti
    SET state = 'running',
        try_number = least(ti.try_number::bigint + CASE WHEN v_method IS NULL THEN 1 ELSE 0 END, 2147483647)::int,
        start_date = CASE WHEN v_method IS NULL THEN v_now ELSE coalesce(ti.start_date, v_now) END,
        end_date = NULL,
        exit_code = NULL,
        worker_job_id = p_job_id,
        hostname = p_hostname,
        last_heartbeat_at = v_now,
        updated_at = v_now,
        next_method = NULL,
        next_kwargs = NULL,
        log_path = p_log_dir || '/' || log_path_part_v1('dag_id', ti.dag_id) || '/' || log_path_part_v1('run_id', ti.run_id)
                   || '/' || log_path_part_v1('task_id', ti.task_id)
                   || CASE WHEN ti.map_index >= 0 THEN '/map_index=' || ti.map_index ELSE '' END
                   || '/attempt=' || least(ti.try_number::bigint + CASE WHEN v_method IS NULL THEN 1 ELSE 0 END,
                                           2147483647) || '.log'
    FROM task t, dag_run r, dag d
    WHERE ti.id = p_ti_id AND ti.state = 'queued'
      AND t.dag_id = ti.dag_id AND t.task_id = ti.task_id
      AND r.id = ti.dag_run_id AND d.dag_id = ti.dag_id
    RETURNING ti.id, ti.dag_id::text, ti.run_id::text, ti.task_id::text, ti.map_index, ti.try_number,
              t.kind::text, t.bash_command, t.env, t.python_callable, t.op_kwargs,
              CASE WHEN t.expand IS NULL THEN NULL
                   ELSE (SELECT jsonb_object_agg(e.key, e.value -> ti.map_index) FROM jsonb_each(t.expand) e)
              END,
              t.execution_timeout, d.fileloc, ti.log_path, r.conf, v_method, v_kwargs,
              (SELECT g.event FROM trigger g WHERE g.id = v_trigger AND v_method IS NOT NULL);
END;
$$;
