-- set_run_state_v2: set_run_state_v1 that knows `preempting` (docs/priority.md, operators): a
-- preempting TI (a victim of preempt_v1 whose try is still stopping) is treated as a running
-- one: it becomes `failed` (mark_failed, cancel) or `success` (mark_success), its try ends here
-- (history row), and heartbeat_v3 no longer moves it back to `scheduled` (only `preempting` TIs
-- go back). Its worker was already told to stop it. Every pool_reservation row of the run's TIs
-- is deleted (a TI of a finished run no longer waits, so no slot stays kept for it); a
-- reservation that a preempting TI's slots were freed for (preempted_for, a TI of another run)
-- stays: that TI still waits. Same arguments and result as v1.
-- Lock: as v1 (dag_run row, then its TI rows), then the run's pool_reservation rows.
-- v1's description follows.
-- set_run_state_v2(dag_id, run_id, action, reason, now): `engine runs mark success|failed`
-- (action 'mark_success' / 'mark_failed') and `engine runs cancel` (action 'cancel').
--   * mark_success: every unfinished TI becomes `success`, the run `success`;
--   * mark_failed and cancel: every running, restarting or deferred TI becomes `failed`, every
--     TI that has not started (none, scheduled, queued, up_for_retry) `skipped` (it never
--     starts), the run `failed`. cancel refuses a run that has already finished;
--   * a try that was running or deferred ends here (task_instance_history row); its worker
--     learns it from heartbeat_v2 and stops the process (SIGTERM, SIGKILL after the grace);
--     a deferred TI's trigger is closed with the reason;
--   * each changed TI and the run get a state_change row; run.state_reason = the reason.
-- Returns one row: (state, tis_changed, tries_stopped).
-- Raises (one line, nothing changed) for an unknown DAG or run, an unknown action, a run
-- already in the target state, and cancelling a finished run.
-- Lock: the dag_run row, then its TI rows (FOR UPDATE, id order): schedule_tis's order.
-- Invariant: a run marked or cancelled has no unfinished TI; every change has its history.
-- Callers may assume: one transaction; all or nothing.
CREATE OR REPLACE FUNCTION set_run_state_v2(p_dag_id text, p_run_id text, p_action text, p_reason text,
                                            p_now timestamptz DEFAULT NULL)
RETURNS TABLE (state text, tis_changed int, tries_stopped int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := coalesce(p_now, now());
    v_reason  text := left(coalesce(p_reason, replace(p_action, '_', ' ') || ' by an operator'), 4000);
    v_target  text := CASE p_action WHEN 'mark_success' THEN 'success' WHEN 'mark_failed' THEN 'failed'
                                    WHEN 'cancel' THEN 'failed' END;
    v_run     record;
    x         record;
    v_new     text;
    v_changed int := 0;
    v_stopped int := 0;
BEGIN
    IF v_target IS NULL THEN
        RAISE EXCEPTION 'unknown run action %; use mark_success, mark_failed or cancel', quote_nullable(p_action);
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
    IF p_action = 'cancel' AND v_run.state NOT IN ('queued', 'running') THEN
        RAISE EXCEPTION 'run % of DAG % has already finished (%); nothing to cancel', quote_literal(p_run_id),
            quote_literal(p_dag_id), v_run.state;
    END IF;
    IF v_run.state = v_target THEN
        RAISE EXCEPTION 'run % of DAG % is already %; nothing changed', quote_literal(p_run_id),
            quote_literal(p_dag_id), v_target;
    END IF;
    FOR x IN
        SELECT ti.* FROM task_instance ti
        WHERE ti.dag_run_id = v_run.id
          AND ti.state IN ('none', 'scheduled', 'queued', 'running', 'preempting', 'restarting', 'deferred',
                           'up_for_retry')
        ORDER BY ti.id
        FOR UPDATE
    LOOP
        v_new := CASE WHEN v_target = 'success' THEN 'success'
                      WHEN x.state IN ('running', 'preempting', 'restarting', 'deferred') THEN 'failed'
                      ELSE 'skipped' END;
        IF x.state IN ('running', 'preempting', 'deferred') THEN
            v_stopped := v_stopped + 1;
            INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool,
                                               pool_slots, queued_at, start_date, end_date, exit_code, hostname,
                                               worker_job_id, log_path, reason)
            VALUES (x.id, x.dag_id, x.run_id, x.task_id, x.map_index, x.try_number, v_new, x.pool, x.pool_slots,
                    x.queued_at, x.start_date, v_now, NULL, x.hostname, x.worker_job_id, x.log_path, v_reason);
        END IF;
        IF x.state = 'deferred' AND x.trigger_id IS NOT NULL THEN
            UPDATE trigger tr SET fired_at = v_now, error = v_reason
            WHERE tr.id = x.trigger_id AND tr.fired_at IS NULL;
        END IF;
        UPDATE task_instance ti
        SET state = v_new, start_date = coalesce(ti.start_date, v_now), end_date = v_now, retry_at = NULL,
            next_method = NULL, next_kwargs = NULL, trigger_id = NULL, state_reason = v_reason, updated_at = v_now
        WHERE ti.id = x.id AND ti.state = x.state;
        INSERT INTO state_change (at, action, dag_id, run_id, task_id, map_index, ti_id, try_number, from_state,
                                  to_state, reason)
        VALUES (v_now, p_action, x.dag_id, x.run_id, x.task_id, x.map_index, x.id, x.try_number, x.state, v_new,
                v_reason);
        v_changed := v_changed + 1;
    END LOOP;
    DELETE FROM pool_reservation rv USING task_instance ti WHERE ti.id = rv.ti_id AND ti.dag_run_id = v_run.id;
    UPDATE dag_run r SET state = v_target, start_date = coalesce(r.start_date, v_now), end_date = v_now,
                         state_reason = v_reason
    WHERE r.id = v_run.id AND r.state = v_run.state;
    INSERT INTO state_change (at, action, dag_id, run_id, from_state, to_state, reason)
    VALUES (v_now, p_action, p_dag_id, p_run_id, v_run.state, v_target, v_reason);
    RETURN QUERY SELECT v_target, v_changed, v_stopped;
END;
$$;
