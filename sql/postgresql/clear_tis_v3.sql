-- clear_tis_v3: on PostgreSQL, clear_tis_v2 (same arguments, result, lock and contract: read it
-- below) with one change, a fix: WHETHER A TI'S WORKER LIVES IS READ AFTER THE TI IS LOCKED.
--   v2 read it in the cursor that locks the TIs, `(SELECT j.state = 'running' FROM job j ...)`
--   beside `FOR UPDATE OF ti`: a TI changed after the cursor's snapshot is locked in its newest
--   version (EvalPlanQual), but the job subquery still reads that snapshot. A worker that
--   registered and claimed the TI after it (while the clear waited for an earlier TI's lock, or
--   during a long clear) read as dead, so its running TI went to `none` instead of `restarting`
--   and a second try could start while the first ran (tests/test_operate.py, "a worker that
--   claimed a TI while a clear waited"). Here the loop reads the job with a
--   statement of its own, after the TI's row is locked: a new snapshot, which sees every job
--   committed by then. (MySQL/MariaDB's clear_tis_v2 locks first and reads the job in a later
--   statement already: it has no v3.)
-- Lock, invariant, callers may assume: v2's.
-- clear_tis_v2: clear_tis_v1 that knows `preempting` (docs/priority.md, operators): a
-- preempting TI (a victim of preempt_v1 whose try is still stopping) is cleared as a running
-- one: to `restarting` while its worker lives (heartbeat_v3 moves it to `none` once the try has
-- stopped, never back to `scheduled`), else to `none`; its try ends here (history row). The
-- pool_reservation row of each cleared TI is deleted (a cleared TI waits again from `none`;
-- queue_tis may reserve for it again later); a reservation that a preempting TI's slots were
-- freed for (preempted_for) stays: that TI still waits. Same arguments and result as v1.
-- Lock: as v1 (run rows, then TI rows), then the cleared TIs' pool_reservation rows.
-- v1's description follows.
-- clear_tis_v2(dag_id, run_id, task_regex, downstream, upstream, only_failed, dry_run, reason,
-- now): `engine tasks clear`. Selects the TIs to clear and, unless dry_run, clears them.
-- Selection (Airflow's `tasks clear`): the DAG's active tasks whose id matches task_regex (a
-- POSIX regular expression, searched; NULL: every task), plus every task downstream and/or
-- upstream of them (transitively) when asked; their TIs in run run_id (NULL: every run of the
-- DAG) that are not `none` or `removed` (nothing to clear); with only_failed, only the
-- `failed` and `upstream_failed` ones.
-- Clearing a TI (compare-and-set on the state read under the row lock):
--   * it gets a new try: max_tries = try_number + the task's retries, and back to `none`, so
--     schedule_tis decides it again by its trigger rule;
--   * a `running` TI whose worker is alive goes to `restarting`: heartbeat_v2 tells the worker
--     to stop the try, and moves the TI to `none` once it has stopped (so the new try never
--     overlaps the old one); its try is recorded as ended in task_instance_history;
--   * a `running` TI whose worker is gone, or a `deferred` one, goes straight to `none` (the
--     try is recorded as ended; a deferred TI's trigger is closed with an error);
--   * one state_change row per TI (action 'clear'), one per run it reopens.
-- Runs with a cleared TI that had finished (success, failed) go back to `running`.
-- Returns one row per selected TI: (ti_id, run_id, task_id, map_index, state, new_state).
-- Raises (one line, nothing changed) for an unknown DAG, an unknown run, a regex that matches
-- no task or is malformed.
-- Lock: the DAG's dag_run rows in scope, then the selected TI rows (FOR UPDATE, id order),
-- the same order as schedule_tis (run rows, then TIs): no deadlock with a scheduler.
-- Invariant: a cleared TI never runs two tries at once; every change has its history row.
-- Callers may assume: one transaction; with dry_run nothing is written.
CREATE OR REPLACE FUNCTION clear_tis_v3(p_dag_id text, p_run_id text, p_task_regex text, p_downstream boolean,
                                        p_upstream boolean, p_only_failed boolean, p_dry_run boolean,
                                        p_reason text, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (ti_id bigint, run_id text, task_id text, map_index int, state text, new_state text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := coalesce(p_now, now());
    v_reason text := left(coalesce(p_reason, 'cleared by an operator'), 4000);
    v_tasks  text[];
    x        record;
    v_new    text;
    v_alive  boolean;
    v_runs   bigint[] := '{}';
BEGIN
    PERFORM 1 FROM dag d WHERE d.dag_id = p_dag_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown DAG %; see `engine dags list`', quote_literal(p_dag_id);
    END IF;
    IF p_run_id IS NOT NULL THEN
        PERFORM 1 FROM dag_run r WHERE r.dag_id = p_dag_id AND r.run_id = p_run_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'DAG % has no run %; see `engine runs list --dag %`', quote_literal(p_dag_id),
                quote_literal(p_run_id), p_dag_id;
        END IF;
    END IF;
    BEGIN
        SELECT coalesce(array_agg(t.task_id), '{}') INTO v_tasks
        FROM task t
        WHERE t.dag_id = p_dag_id AND t.is_active AND (p_task_regex IS NULL OR t.task_id ~ p_task_regex);
    EXCEPTION WHEN invalid_regular_expression THEN
        RAISE EXCEPTION 'bad --task regular expression %: %', quote_literal(p_task_regex), SQLERRM;
    END;
    IF cardinality(v_tasks) = 0 THEN
        RAISE EXCEPTION 'no task of DAG % matches --task %; see `engine tasks list`', quote_literal(p_dag_id),
            quote_literal(p_task_regex);
    END IF;
    -- Downstream and upstream of the matched tasks (not upstream of their downstream).
    WITH RECURSIVE down(task_id) AS (
        SELECT unnest(v_tasks) WHERE coalesce(p_downstream, false)
        UNION
        SELECT dep.task_id FROM task_dependency dep JOIN down ON dep.upstream_task_id = down.task_id
        WHERE dep.dag_id = p_dag_id
    ), up(task_id) AS (
        SELECT unnest(v_tasks) WHERE coalesce(p_upstream, false)
        UNION
        SELECT dep.upstream_task_id FROM task_dependency dep JOIN up ON dep.task_id = up.task_id
        WHERE dep.dag_id = p_dag_id
    )
    SELECT array_agg(DISTINCT a.task_id) INTO v_tasks
    FROM (SELECT unnest(v_tasks) AS task_id UNION SELECT down.task_id FROM down UNION SELECT up.task_id FROM up) a;

    IF NOT coalesce(p_dry_run, false) THEN
        PERFORM 1 FROM dag_run r
        WHERE r.dag_id = p_dag_id AND (p_run_id IS NULL OR r.run_id = p_run_id)
        ORDER BY r.id FOR UPDATE;
    END IF;

    FOR x IN
        SELECT ti.*, t.retries
        FROM task_instance ti
        LEFT JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
        WHERE ti.dag_id = p_dag_id AND (p_run_id IS NULL OR ti.run_id = p_run_id)
          AND ti.task_id = ANY (v_tasks)
          AND ti.state NOT IN ('none', 'removed')
          AND (NOT coalesce(p_only_failed, false) OR ti.state IN ('failed', 'upstream_failed'))
        ORDER BY ti.id
        FOR UPDATE OF ti
    LOOP
        -- (v3: a statement of its own, after the row is locked: a snapshot that sees every job
        -- committed by now.)
        v_alive := coalesce((SELECT j.state = 'running' FROM job j WHERE j.id = x.worker_job_id), false);
        v_new := CASE WHEN x.state IN ('running', 'preempting') AND v_alive THEN 'restarting'
                      WHEN x.state = 'restarting' THEN 'restarting'
                      ELSE 'none' END;
        ti_id := x.id; run_id := x.run_id; task_id := x.task_id; map_index := x.map_index;
        state := x.state; new_state := v_new;
        RETURN NEXT;
        CONTINUE WHEN coalesce(p_dry_run, false);
        v_runs := v_runs || x.dag_run_id;

        IF x.state IN ('running', 'preempting', 'deferred') THEN  -- the try in progress ends here
            INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                               pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                               worker_job_id, log_path, reason)
            VALUES (x.id, x.dag_id, x.run_id, x.task_id, x.map_index, x.try_number, 'failed', x.pool, x.pool_slots,
                    x.queued_at, x.start_date, v_now, NULL, x.hostname, x.worker_job_id, x.log_path, v_reason);
        END IF;
        IF x.state = 'deferred' AND x.trigger_id IS NOT NULL THEN
            UPDATE trigger tr SET fired_at = v_now, error = v_reason
            WHERE tr.id = x.trigger_id AND tr.fired_at IS NULL;
        END IF;
        UPDATE task_instance ti
        SET state = v_new,
            max_tries = least(ti.try_number::bigint + coalesce(x.retries, 0), 2147483647)::int,
            start_date = NULL, end_date = NULL, exit_code = NULL, retry_at = NULL, queued_at = NULL,
            queued_by_job_id = NULL, next_method = NULL, next_kwargs = NULL, trigger_id = NULL,
            worker_job_id = CASE WHEN v_new = 'restarting' THEN ti.worker_job_id END,
            hostname = CASE WHEN v_new = 'restarting' THEN ti.hostname END,
            state_reason = v_reason, updated_at = v_now
        WHERE ti.id = x.id AND ti.state = x.state;
        DELETE FROM pool_reservation r WHERE r.ti_id = x.id;
        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        VALUES (v_now, 'clear', x.dag_id, x.run_id, x.task_id, x.map_index, x.id, x.try_number, x.state, v_new,
                v_reason);
    END LOOP;

    IF NOT coalesce(p_dry_run, false) THEN
        WITH old AS (
            SELECT r.id, r.state FROM dag_run r
            WHERE r.id = ANY (v_runs) AND r.state IN ('success', 'failed')
        ), reopened AS (
            UPDATE dag_run r SET state = 'running', end_date = NULL, state_reason = v_reason
            FROM old WHERE r.id = old.id AND r.state = old.state
            RETURNING r.dag_id, r.run_id, old.state AS old_state
        )
        INSERT INTO state_change (at, action, dag_id, run_id, from_state, to_state, reason)
        SELECT v_now, 'clear', o.dag_id, o.run_id, o.old_state, 'running', v_reason FROM reopened o;
    END IF;
END;
$$;
