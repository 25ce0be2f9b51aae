-- set_ti_state_v2: set_ti_state_v1 that knows `preempting` (docs/priority.md, operators): a
-- preempting TI (a victim of preempt_v1 whose try is still stopping) is treated as a running
-- one: `kill` changes it, its try ends here (history row with the new state), and heartbeat_v3
-- no longer moves it back to `scheduled`. Its worker was already told to stop it. The
-- pool_reservation row of each changed TI is deleted (a TI killed or marked no longer waits);
-- a reservation that a preempting TI's slots were freed for (preempted_for) stays: that TI
-- still waits. Same arguments and result as v1.
-- Lock: as v1 (dag_run row, then the TI rows), then the changed TIs' pool_reservation rows.
-- v1's description follows.
-- set_ti_state_v2(dag_id, run_id, task_id, map_index, new_state, action, reason, now):
-- `engine tasks mark success|failed` (action 'mark_success' / 'mark_failed') and
-- `engine tasks kill` (action 'kill', new_state 'failed'): the TIs of task_id in the run
-- (map_index NULL: every map index) become new_state, each a compare-and-set on the state
-- read under its row lock, with a state_change row.
--   * `kill` changes only unfinished TIs (none, scheduled, queued, running, restarting,
--     deferred, up_for_retry): queued and scheduled ones never start;
--   * a `running` (or `deferred`) TI's try ends here: a task_instance_history row with the new
--     state and the reason; its worker learns it from heartbeat_v2 and stops the process
--     (SIGTERM, SIGKILL after the grace), and its late report changes nothing. A deferred
--     TI's trigger is closed with the reason as its error;
--   * a TI already in new_state is left alone;
--   * a finished run (success, failed) with a changed TI goes back to `running`, so
--     schedule_tis decides its downstream TIs and its final state again.
-- Returns (ti_id, map_index, state, new_state) per changed TI.
-- Raises (one line, nothing changed) for an unknown DAG, run, task or map index, a new_state
-- other than success/failed, and when no TI needs the change (e.g. killing a finished TI).
-- Lock: the dag_run row, then the TI rows (FOR UPDATE, id order): schedule_tis's order.
-- Invariant: every changed TI has its state_change row; an ended try its history row.
-- Callers may assume: one transaction; all the TIs change or none.
CREATE OR REPLACE FUNCTION set_ti_state_v2(p_dag_id text, p_run_id text, p_task_id text, p_map_index int,
                                           p_new_state text, p_action text, p_reason text,
                                           p_now timestamptz DEFAULT NULL)
RETURNS TABLE (ti_id bigint, map_index int, state text, new_state text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := coalesce(p_now, now());
    v_reason text := left(coalesce(p_reason, p_action || ' by an operator'), 4000);
    v_run    record;
    x        record;
    v_seen   int := 0;
    v_done   int := 0;
BEGIN
    IF p_new_state IS NULL OR p_new_state NOT IN ('success', 'failed') THEN
        RAISE EXCEPTION 'a TI can be marked success or failed, not %', quote_nullable(p_new_state);
    END IF;
    PERFORM 1 FROM dag d WHERE d.dag_id = p_dag_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown DAG %; see `engine dags list`', quote_literal(p_dag_id);
    END IF;
    SELECT r.* INTO v_run FROM dag_run r WHERE r.dag_id = p_dag_id AND r.run_id = p_run_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'DAG % has no run %; see `engine runs list --dag %`', quote_literal(p_dag_id),
            quote_literal(p_run_id), p_dag_id;
    END IF;
    FOR x IN
        SELECT ti.* FROM task_instance ti
        WHERE ti.dag_run_id = v_run.id AND ti.task_id = p_task_id
          AND (p_map_index IS NULL OR ti.map_index = p_map_index)
        ORDER BY ti.id
        FOR UPDATE
    LOOP
        v_seen := v_seen + 1;
        CONTINUE WHEN x.state = p_new_state;
        CONTINUE WHEN p_action = 'kill'
            AND x.state NOT IN ('none', 'scheduled', 'queued', 'running', 'preempting', 'restarting', 'deferred',
                             'up_for_retry');
        v_done := v_done + 1;
        IF x.state IN ('running', 'preempting', 'deferred') THEN  -- the try in progress ends here
            INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                               pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                               worker_job_id, log_path, reason)
            VALUES (x.id, x.dag_id, x.run_id, x.task_id, x.map_index, x.try_number, p_new_state, x.pool, x.pool_slots,
                    x.queued_at, x.start_date, v_now, NULL, x.hostname, x.worker_job_id, x.log_path, v_reason);
        END IF;
        IF x.state = 'deferred' AND x.trigger_id IS NOT NULL THEN
            UPDATE trigger tr SET fired_at = v_now, error = v_reason
            WHERE tr.id = x.trigger_id AND tr.fired_at IS NULL;
        END IF;
        UPDATE task_instance ti
        SET state = p_new_state, start_date = coalesce(ti.start_date, v_now), end_date = v_now, retry_at = NULL,
            next_method = NULL, next_kwargs = NULL, trigger_id = NULL, state_reason = v_reason, updated_at = v_now
        WHERE ti.id = x.id AND ti.state = x.state;
        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        VALUES (v_now, p_action, x.dag_id, x.run_id, x.task_id, x.map_index, x.id, x.try_number, x.state,
                p_new_state, v_reason);
        DELETE FROM pool_reservation r WHERE r.ti_id = x.id;
        ti_id := x.id; map_index := x.map_index; state := x.state; new_state := p_new_state;
        RETURN NEXT;
    END LOOP;
    IF v_seen = 0 THEN
        RAISE EXCEPTION '%', format('run %L of DAG %L has no TI of task %L%s; see `engine tasks list %s %s`',
            p_run_id, p_dag_id, p_task_id,
            CASE WHEN p_map_index IS NULL THEN '' ELSE ' with map index ' || p_map_index END, p_dag_id, p_run_id);
    END IF;
    IF v_done = 0 THEN
        RAISE EXCEPTION 'nothing to change: every TI of task % in run % is already %', quote_literal(p_task_id),
            quote_literal(p_run_id),
            CASE WHEN p_action = 'kill' THEN 'finished' ELSE p_new_state END;
    END IF;
    IF v_run.state IN ('success', 'failed') THEN
        UPDATE dag_run r SET state = 'running', end_date = NULL, state_reason = v_reason
        WHERE r.id = v_run.id AND r.state = v_run.state;
        INSERT INTO state_change (at, action, dag_id, run_id, from_state, to_state, reason)
        VALUES (v_now, p_action, p_dag_id, p_run_id, v_run.state, 'running', v_reason);
    END IF;
END;
$$;
