-- schedule_tis_v1(now, batch): move a batch of running dag runs forward.
--   * up_for_retry TIs whose retry_at has passed become `scheduled`;
--   * TIs in state 'none' whose upstream TIs allow it become `scheduled`, `skipped` or
--     `upstream_failed` by their trigger rule (repeated so skips and failures propagate down
--     a whole chain in one call);
--   * runs whose TIs are all done become `success`, or `failed` when a leaf task failed or
--     is upstream_failed (Airflow's rule).
--
-- Lock: the `dag_run` rows of the batch, FOR UPDATE SKIP LOCKED, oldest scheduling decision
-- first: concurrent schedulers take disjoint batches and never wait for each other.
-- Invariant: only this function moves a TI out of 'none' and a run out of 'running', each
-- as a compare-and-set on the state it expects.
-- Callers may assume: it returns counts, never blocks on another scheduler, and a run is
-- examined again on a later call when it was skipped because it was locked.
CREATE OR REPLACE FUNCTION schedule_tis_v1(p_now timestamptz DEFAULT NULL, p_batch int DEFAULT 100)
RETURNS TABLE (runs_examined int, tis_scheduled int, tis_skipped int, tis_upstream_failed int, runs_finished int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now       timestamptz := coalesce(p_now, now());
    v_runs      bigint[];
    v_n         int;
    v_scheduled int := 0;
    v_skipped   int := 0;
    v_upfailed  int := 0;
    v_finished  int := 0;
BEGIN
    SELECT coalesce(array_agg(r.id), '{}') INTO v_runs
    FROM (
        SELECT dr.id FROM dag_run dr
        WHERE dr.state = 'running'
        ORDER BY dr.last_scheduling_decision NULLS FIRST, dr.id
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    ) r;

    -- Retries whose delay has passed.
    UPDATE task_instance ti SET state = 'scheduled', updated_at = v_now
    WHERE ti.dag_run_id = ANY (v_runs) AND ti.state = 'up_for_retry' AND ti.retry_at <= v_now;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_scheduled := v_scheduled + v_n;

    -- Trigger rules. Each round decides every TI whose upstreams allow a decision; a round
    -- that skipped or failed something may unblock the next level, so repeat until quiet.
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
            WHERE ti.dag_run_id = ANY (v_runs) AND ti.state = 'none'
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
        INTO v_n, v_skipped, v_upfailed  -- this round's counts, added below
        FROM changed;
        v_scheduled := v_scheduled + v_n;
        tis_skipped := coalesce(tis_skipped, 0) + v_skipped;
        tis_upstream_failed := coalesce(tis_upstream_failed, 0) + v_upfailed;
        EXIT WHEN v_skipped + v_upfailed = 0;
    END LOOP;

    -- Finish runs whose TIs are all done.
    WITH finished AS (
        UPDATE dag_run r
        SET state = CASE WHEN EXISTS (
                    SELECT 1 FROM task_instance ti
                    WHERE ti.dag_run_id = r.id AND ti.state IN ('failed', 'upstream_failed')
                      AND NOT EXISTS (SELECT 1 FROM task_dependency dep
                                      WHERE dep.dag_id = ti.dag_id AND dep.upstream_task_id = ti.task_id))
                THEN 'failed' ELSE 'success' END,
            end_date = v_now
        WHERE r.id = ANY (v_runs) AND r.state = 'running'
          AND NOT EXISTS (SELECT 1 FROM task_instance ti
                          WHERE ti.dag_run_id = r.id
                            AND ti.state NOT IN ('success', 'failed', 'skipped', 'upstream_failed'))
        RETURNING 1
    )
    SELECT count(*) INTO v_finished FROM finished;

    UPDATE dag_run r SET last_scheduling_decision = v_now WHERE r.id = ANY (v_runs);

    RETURN QUERY SELECT cardinality(v_runs), v_scheduled, coalesce(tis_skipped, 0),
                        coalesce(tis_upstream_failed, 0), v_finished;
END;
$$;
