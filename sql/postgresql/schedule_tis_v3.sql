-- schedule_tis_v3(now, batch): schedule_tis_v2 (below) plus dynamic task mapping. A task mapped
-- over an upstream's result (`.expand(x=upstream.output)`: task.map_upstream names the upstream)
-- has one TI per run at first, with map_index -1. When the trigger rules schedule that TI, the
-- upstream's output (task_output_v1) decides, in the same statement set:
--   * a list of n items (1 <= n <= 100,000, engine/validate.py MAX_MAP_LENGTH): the TI becomes
--     map_index 0 and n - 1 more TIs (map_index 1 .. n-1) are created `scheduled`, with the same
--     pool, priority and limits as any TI: queue_tis counts them against every limit as usual.
--     Each one's element is read by the worker when it starts the try (named query task_inputs);
--   * an empty list: the TI is `skipped` (reason 'mapped over an empty list'), and its
--     downstream follows the trigger rules in the same call;
--   * no result, or not a list, or more than 100,000 items: the TI is `failed` with a reason
--     naming the upstream and what it returned; its downstream becomes upstream_failed.
-- Mapped TIs of a task mapped over literal lists are made at run start (map_count), as before.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: as v2 (the new TIs belong to a run of the batch, whose
-- row is locked; nothing else creates TIs of a running run). Counts: a mapped TI that is
-- created counts in tis_scheduled, an empty-list skip in tis_skipped, a failed expansion in
-- tis_upstream_failed (the TI failed before it ran).
--
-- As schedule_tis_v2(now, batch): move a batch of running dag runs forward. As schedule_tis_v1,
-- plus removed tasks and per-run isolation. For the runs of the batch:
--   * TIs in state 'none', 'scheduled' or 'up_for_retry' whose task a sync removed (no active
--     task row) become `removed` (Airflow's state): they never run; first, so nothing below
--     schedules them;
--   * up_for_retry TIs whose retry_at has passed become `scheduled`;
--   * TIs in state 'none' whose upstream TIs allow it become `scheduled`, `skipped` or
--     `upstream_failed` by their trigger rule (repeated so skips and failures propagate down
--     a whole chain in one call);
--   * runs whose TIs are all done (success, failed, skipped, upstream_failed or removed) become
--     `success`, or `failed` when a leaf task failed or is upstream_failed (Airflow's rule; a
--     removed TI is done and is not a failure).
--
-- ISOLATION: one run's bad data never stops the others. The batch is first moved by set-based
-- statements in a subtransaction (BEGIN ... EXCEPTION). If anything in it raises, it is rolled
-- back and the batch is retried run by run, each run in its own subtransaction: a run that
-- still fails is left as it was and its DAG gets dag.error_step = 'schedule_tis',
-- dag.error = one line naming the run and the error, dag.error_at = now; the other runs move
-- on. When every run of a DAG examined by a call succeeds, the call clears a 'schedule_tis'
-- error of that DAG. Deadlocks and serialization failures (40P01, 40001) and lock timeouts
-- (55P03) are not a run's fault: they are raised, as by v1. Every run of the batch, failed or
-- not, gets last_scheduling_decision = now, so a failing run goes to the back of the line.
--
-- LOCK: the `dag_run` rows of the batch, FOR UPDATE SKIP LOCKED, oldest scheduling decision
-- first: concurrent schedulers take disjoint batches and never wait for each other. A `dag`
-- row is written only to record or clear an error (then it is locked to commit).
-- INVARIANT: only schedule_tis moves a TI out of 'none' and a run out of 'running', each as a
-- compare-and-set on the state it expects; a run's changes are all made or none.
-- CALLERS MAY ASSUME: it returns counts (v1's, then tis_removed and runs_errored: runs whose
-- error was recorded), raises only for transient lock errors, never blocks on another
-- scheduler's batch, and a run skipped because it was locked is examined on a later call.
CREATE OR REPLACE FUNCTION schedule_tis_v3(p_now timestamptz DEFAULT NULL, p_batch int DEFAULT 100)
RETURNS TABLE (runs_examined int, tis_scheduled int, tis_skipped int, tis_upstream_failed int, runs_finished int,
               tis_removed int, runs_errored int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now       timestamptz := coalesce(p_now, now());
    v_runs      bigint[];
    v_part      bigint[];            -- the runs of this attempt
    v_attempt   int := 0;            -- 0: the whole batch; i > 0: the batch's i-th run alone
    v_last      int := 0;            -- the last attempt (the batch's size once the batch failed)
    v_ok        bigint[] := '{}';    -- runs moved by a successful attempt
    v_bad       bigint[] := '{}';    -- runs whose error was recorded
    -- this attempt's counts: added to the totals only when it succeeds (PL/pgSQL variables
    -- are not rolled back with the subtransaction)
    a_scheduled int; a_skipped int; a_upfailed int; a_finished int; a_removed int;
    r_scheduled int; r_skipped int; r_upfailed int; r_mapped int; r_mskipped int; r_mfailed int;
    v_scheduled int := 0;
    v_skipped   int := 0;
    v_upfailed  int := 0;
    v_finished  int := 0;
    v_removed   int := 0;
BEGIN
    SELECT coalesce(array_agg(r.id), '{}') INTO v_runs
    FROM (
        SELECT dr.id FROM dag_run dr
        WHERE dr.state = 'running'
        ORDER BY dr.last_scheduling_decision NULLS FIRST, dr.id
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    ) r;

    WHILE v_attempt <= v_last LOOP
        v_part := CASE WHEN v_attempt = 0 THEN v_runs ELSE ARRAY[v_runs[v_attempt]] END;
        BEGIN
            a_scheduled := 0; a_skipped := 0; a_upfailed := 0; a_finished := 0;

            -- Tasks a sync removed: their unstarted TIs never run.
            UPDATE task_instance ti SET state = 'removed', updated_at = v_now
            WHERE ti.dag_run_id = ANY (v_part) AND ti.state IN ('none', 'scheduled', 'up_for_retry')
              AND NOT EXISTS (SELECT 1 FROM task t
                              WHERE t.dag_id = ti.dag_id AND t.task_id = ti.task_id AND t.is_active);
            GET DIAGNOSTICS a_removed = ROW_COUNT;

            -- Retries whose delay has passed.
            UPDATE task_instance ti SET state = 'scheduled', updated_at = v_now
            WHERE ti.dag_run_id = ANY (v_part) AND ti.state = 'up_for_retry' AND ti.retry_at <= v_now;
            GET DIAGNOSTICS a_scheduled = ROW_COUNT;

            -- Trigger rules. Each round decides every TI whose upstreams allow a decision; a
            -- round that skipped or failed something may unblock the next level, so repeat.
            LOOP
                WITH counts AS (
                    SELECT ti.id, t.trigger_rule,
                           count(up.id) AS total,
                           count(up.id) FILTER (WHERE up.state = 'success') AS ok,
                           count(up.id) FILTER (WHERE up.state = 'skipped') AS skipped,
                           count(up.id) FILTER (WHERE up.state = 'failed') AS failed,
                           count(up.id) FILTER (WHERE up.state = 'upstream_failed') AS upfailed,
                           count(up.id) FILTER (WHERE up.state IN ('success', 'skipped', 'failed', 'upstream_failed')) AS done
                    FROM task_instance ti
                    JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
                    LEFT JOIN task_dependency dep ON dep.dag_id = ti.dag_id AND dep.task_id = ti.task_id
                    LEFT JOIN task_instance up ON up.dag_run_id = ti.dag_run_id AND up.task_id = dep.upstream_task_id
                    WHERE ti.dag_run_id = ANY (v_part) AND ti.state = 'none'
                    GROUP BY ti.id, t.trigger_rule
                ), decided AS (
                    SELECT c.id,
                           CASE c.trigger_rule
                               WHEN 'all_success' THEN CASE
                                   WHEN c.failed + c.upfailed > 0 THEN 'upstream_failed'
                                   WHEN c.skipped > 0 THEN 'skipped'
                                   WHEN c.ok = c.total THEN 'scheduled' END
                               WHEN 'all_failed' THEN CASE
                                   WHEN c.ok + c.skipped > 0 THEN 'skipped'
                                   WHEN c.failed + c.upfailed = c.total THEN 'scheduled' END
                               WHEN 'all_done' THEN CASE
                                   WHEN c.done = c.total THEN 'scheduled' END
                               WHEN 'one_success' THEN CASE
                                   WHEN c.ok > 0 OR c.total = 0 THEN 'scheduled'
                                   WHEN c.done = c.total AND c.failed + c.upfailed > 0 THEN 'upstream_failed'
                                   WHEN c.done = c.total THEN 'skipped' END
                               WHEN 'one_failed' THEN CASE
                                   WHEN c.failed + c.upfailed > 0 OR c.total = 0 THEN 'scheduled'
                                   WHEN c.done = c.total THEN 'skipped' END
                               WHEN 'none_failed' THEN CASE
                                   WHEN c.failed + c.upfailed > 0 THEN 'upstream_failed'
                                   WHEN c.done = c.total THEN 'scheduled' END
                               WHEN 'none_skipped' THEN CASE
                                   WHEN c.skipped > 0 THEN 'skipped'
                                   WHEN c.done = c.total THEN 'scheduled' END
                               WHEN 'always' THEN 'scheduled'
                           END AS new_state
                    FROM counts c
                ), changed AS (
                    UPDATE task_instance ti
                    SET state = d.new_state,
                        updated_at = v_now,
                        start_date = CASE WHEN d.new_state = 'scheduled' THEN ti.start_date ELSE v_now END,
                        end_date = CASE WHEN d.new_state = 'scheduled' THEN ti.end_date ELSE v_now END
                    FROM decided d
                    WHERE ti.id = d.id AND d.new_state IS NOT NULL AND ti.state = 'none'
                    RETURNING ti.state
                )
                SELECT count(*) FILTER (WHERE state = 'scheduled'),
                       count(*) FILTER (WHERE state = 'skipped'),
                       count(*) FILTER (WHERE state = 'upstream_failed')
                INTO r_scheduled, r_skipped, r_upfailed
                FROM changed;
                -- Dynamic mapping (v3): TIs of a task mapped over an upstream's result, just
                -- scheduled with map_index -1, take the size of that result (header).
                WITH placeholder AS (
                    SELECT ti.id, t.map_upstream, task_output_v1(ti.dag_run_id, t.map_upstream) AS v
                    FROM task_instance ti
                    JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
                    WHERE ti.dag_run_id = ANY (v_part) AND ti.state = 'scheduled' AND ti.map_index = -1
                      AND t.map_upstream IS NOT NULL
                ), sized AS (
                    SELECT p.id, p.map_upstream, p.v,
                           CASE WHEN jsonb_typeof(p.v) = 'array' THEN jsonb_array_length(p.v) END AS n
                    FROM placeholder p
                ), ended AS (
                    UPDATE task_instance ti
                    SET state = CASE WHEN s.n = 0 THEN 'skipped' ELSE 'failed' END,
                        state_reason = CASE
                            WHEN s.n = 0 THEN format('mapped over an empty list (the result of %s)', s.map_upstream)
                            WHEN s.v IS NULL THEN format('cannot map over the result of %s: it has none (it did not '
                                                         'succeed, or returned None); return a list from it', s.map_upstream)
                            WHEN s.n IS NULL THEN format('cannot map over the result of %s: it is a %s, not a list; '
                                                         'return a list from it', s.map_upstream, jsonb_typeof(s.v))
                            ELSE format('cannot map over the result of %s: %s items, more than 100000 (MAX_MAP_LENGTH); '
                                        'return fewer', s.map_upstream, s.n) END,
                        start_date = v_now, end_date = v_now, updated_at = v_now
                    FROM sized s
                    WHERE ti.id = s.id AND (s.n IS NULL OR s.n = 0 OR s.n > 100000)
                    RETURNING ti.state
                ), grown AS (
                    INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, max_tries,
                                               priority_weight, pool, pool_slots, queue, executor, run_after, updated_at)
                    SELECT ti.dag_run_id, ti.dag_id, ti.run_id, ti.task_id, g, 'scheduled', ti.max_tries,
                           ti.priority_weight, ti.pool, ti.pool_slots, ti.queue, ti.executor, ti.run_after, v_now
                    FROM sized s
                    JOIN task_instance ti ON ti.id = s.id
                    CROSS JOIN LATERAL generate_series(1, s.n - 1) AS g
                    WHERE s.n BETWEEN 1 AND 100000
                    RETURNING 1
                ), first AS (
                    UPDATE task_instance ti SET map_index = 0, updated_at = v_now
                    FROM sized s
                    WHERE ti.id = s.id AND s.n BETWEEN 1 AND 100000
                    RETURNING 1
                )
                SELECT (SELECT count(*) FROM grown),
                       (SELECT count(*) FROM ended WHERE state = 'skipped'),
                       (SELECT count(*) FROM ended WHERE state = 'failed')
                INTO r_mapped, r_mskipped, r_mfailed;

                a_scheduled := a_scheduled + r_scheduled + r_mapped;
                a_skipped := a_skipped + r_skipped + r_mskipped;
                a_upfailed := a_upfailed + r_upfailed + r_mfailed;
                EXIT WHEN r_skipped + r_upfailed + r_mskipped + r_mfailed = 0;
            END LOOP;

            -- Finish runs whose TIs are all done (removed counts as done, not as a failure).
            WITH finished AS (
                UPDATE dag_run r
                SET state = CASE WHEN EXISTS (
                            SELECT 1 FROM task_instance ti
                            WHERE ti.dag_run_id = r.id AND ti.state IN ('failed', 'upstream_failed')
                              AND NOT EXISTS (SELECT 1 FROM task_dependency dep
                                              WHERE dep.dag_id = ti.dag_id AND dep.upstream_task_id = ti.task_id))
                        THEN 'failed' ELSE 'success' END,
                    end_date = v_now
                WHERE r.id = ANY (v_part) AND r.state = 'running'
                  AND NOT EXISTS (SELECT 1 FROM task_instance ti
                                  WHERE ti.dag_run_id = r.id
                                    AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed'))
                RETURNING 1
            )
            SELECT count(*) INTO a_finished FROM finished;

            -- The attempt held: keep its counts (nothing below can raise).
            v_scheduled := v_scheduled + a_scheduled;
            v_skipped := v_skipped + a_skipped;
            v_upfailed := v_upfailed + a_upfailed;
            v_finished := v_finished + a_finished;
            v_removed := v_removed + a_removed;
            v_ok := v_ok || v_part;
        EXCEPTION WHEN OTHERS THEN
            IF SQLSTATE IN ('40P01', '40001', '55P03') THEN
                RAISE;   -- transient, nobody's data: the whole call fails as v1 would
            END IF;
            IF cardinality(v_part) > 1 THEN
                v_last := cardinality(v_runs);   -- find the culprit: run by run
            ELSE
                v_bad := v_bad || v_part;
                UPDATE dag d
                SET error_step = 'schedule_tis',
                    error = replace(format('run %s: %s', r.run_id, SQLERRM), E'\n', ' '),
                    error_at = v_now
                FROM dag_run r
                WHERE r.id = v_part[1] AND d.dag_id = r.dag_id;
            END IF;
        END;
        v_attempt := v_attempt + 1;
    END LOOP;

    -- A DAG whose examined runs all moved is fine again (only this step's error is cleared).
    UPDATE dag d SET error_step = NULL, error = NULL, error_at = NULL
    WHERE d.error_step = 'schedule_tis'
      AND d.dag_id IN (SELECT r.dag_id FROM dag_run r WHERE r.id = ANY (v_ok))
      AND d.dag_id NOT IN (SELECT r.dag_id FROM dag_run r WHERE r.id = ANY (v_bad));

    UPDATE dag_run r SET last_scheduling_decision = v_now WHERE r.id = ANY (v_runs);

    RETURN QUERY SELECT cardinality(v_runs), v_scheduled, v_skipped, v_upfailed, v_finished, v_removed,
                        cardinality(v_bad);
END;
$$;
