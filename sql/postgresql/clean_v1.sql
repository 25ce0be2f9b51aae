-- clean_v1(table, older_than_s, batch, dry_run, interval_s, now): retention. Deletes rows older
-- than older_than_s, at most `batch` rows per table per call, so each call is one short
-- transaction; call it again while any row says more = true (`engine db clean` does; a DBA can
-- schedule `SELECT * FROM clean_v1(NULL, 2592000, 1000, false, NULL, NULL)` every minute).
-- One row per table examined: (ran, table_name, deleted, more). With dry_run, deleted counts
-- every row that would go (nothing is deleted, more is false).
--
-- What goes, and what always stays (anything a live run or a live job still needs):
--   dag_run                runs in success/failed that ended before the cutoff, with their task
--                          instances (ON DELETE CASCADE); never the newest run of a DAG (as
--                          Airflow's `db clean` keeps the last run), never a run with a TI that
--                          has not finished (none/scheduled/queued/running/up_for_retry/deferred).
--                          `batch` counts runs.
--   task_instance_history  tries that ended before the cutoff, unless their run is queued/running.
--   trigger                triggers that fired (or ended) before the cutoff, unless a TI that has
--                          not finished still points at it (a resumed try reads its event).
--   job                    jobs no longer running that ended before the cutoff, unless an
--                          unfinished TI or an unfired trigger names it (reset_orphans reads the
--                          job to say why a try failed).
--   tick_log               scheduler passes that started before the cutoff.
-- table NULL: every table above, in that order; otherwise only the one named (an unknown name
-- raises one line listing the known ones).
--
-- interval_s: the scheduler passes clean_interval: when the cleanup last caught up (a call
-- that deleted fewer than `batch` rows from every table) less than interval_s ago, nothing is
-- done and one row (false, NULL, 0, false) comes back. While a backlog remains, every call
-- deletes one more batch per table (each scheduler pass does a bounded amount). NULL: always due.
-- older_than_s is clamped into [0, 3,153,600,000 s], batch into [1, 100000].
--
-- Lock: the row scheduler_lock('db_clean'), FOR UPDATE NOWAIT, held to commit; its last_run_at
-- is the "last caught up" stamp. A second cleaner gets SQLSTATE 55P03 (lock_not_available) at
-- once: the scheduler reports "busy", `engine db clean` retries. Rows to delete are taken FOR
-- UPDATE SKIP LOCKED: a row another transaction holds is left for the next call.
-- Invariant: no row that a run in queued/running, an unfinished TI or a running job can still
-- read is deleted; the conditions are re-checked on the locked rows (compare-and-set).
-- Callers may assume: one call holds row locks on at most `batch` rows per table (plus the
-- cascaded TIs of `batch` runs) and never touches rows of live runs, so a running scheduler
-- does not wait on it; calling it every pass is cheap when not due (one row lock).
CREATE OR REPLACE FUNCTION clean_v1(p_table text, p_older_than_s double precision, p_batch int,
                                    p_dry_run boolean, p_interval_s double precision DEFAULT NULL,
                                    p_now timestamptz DEFAULT NULL)
RETURNS TABLE (ran boolean, table_name text, deleted bigint, more boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    c_max_s  CONSTANT double precision := 3153600000;  -- engine/validate.py MAX_SECONDS
    c_tables CONSTANT text[] := ARRAY['dag_run', 'task_instance_history', 'trigger', 'job', 'tick_log'];
    c_done   CONSTANT text[] := ARRAY['success', 'failed', 'skipped', 'upstream_failed', 'removed'];
    v_now    timestamptz := coalesce(p_now, now());
    v_cutoff timestamptz := coalesce(p_now, now())
                            - make_interval(secs => least(greatest(coalesce(p_older_than_s, c_max_s), 0), c_max_s));
    v_batch  int := least(greatest(coalesce(p_batch, 1000), 1), 100000);
    v_last   timestamptz;
    v_table  text;
    v_rows   bigint;
    v_more   boolean := false;
BEGIN
    IF p_table IS NOT NULL AND NOT p_table = ANY (c_tables) THEN
        RAISE EXCEPTION 'clean_v1: unknown table %; use one of %', p_table, array_to_string(c_tables, ', ');
    END IF;
    SELECT l.last_run_at INTO v_last FROM scheduler_lock l WHERE l.name = 'db_clean' FOR UPDATE NOWAIT;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'scheduler_lock row db_clean is missing; run `engine db upgrade`';
    END IF;
    IF p_interval_s IS NOT NULL AND v_last IS NOT NULL
       AND v_last > v_now - make_interval(secs => least(greatest(p_interval_s, 0), c_max_s)) THEN
        RETURN QUERY SELECT false, NULL::text, 0::bigint, false;
        RETURN;
    END IF;

    FOREACH v_table IN ARRAY c_tables LOOP
        CONTINUE WHEN p_table IS NOT NULL AND v_table <> p_table;
        IF v_table = 'dag_run' THEN
            IF p_dry_run THEN
                SELECT count(*) INTO v_rows FROM dag_run r
                WHERE r.state IN ('success', 'failed') AND r.end_date < v_cutoff
                  AND r.id < (SELECT max(n.id) FROM dag_run n WHERE n.dag_id = r.dag_id)
                  AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.dag_run_id = r.id AND NOT ti.state = ANY (c_done));
            ELSE
                DELETE FROM dag_run d
                WHERE d.id IN (SELECT r.id FROM dag_run r
                               WHERE r.state IN ('success', 'failed') AND r.end_date < v_cutoff
                                 AND r.id < (SELECT max(n.id) FROM dag_run n WHERE n.dag_id = r.dag_id)
                                 AND NOT EXISTS (SELECT 1 FROM task_instance ti
                                                 WHERE ti.dag_run_id = r.id AND NOT ti.state = ANY (c_done))
                               LIMIT v_batch FOR UPDATE SKIP LOCKED)
                  AND d.state IN ('success', 'failed')
                  AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.dag_run_id = d.id AND NOT ti.state = ANY (c_done));
                GET DIAGNOSTICS v_rows = ROW_COUNT;
            END IF;
        ELSIF v_table = 'task_instance_history' THEN
            IF p_dry_run THEN
                SELECT count(*) INTO v_rows FROM task_instance_history h
                WHERE h.end_date < v_cutoff
                  AND NOT EXISTS (SELECT 1 FROM dag_run r WHERE r.dag_id = h.dag_id AND r.run_id = h.run_id
                                                            AND r.state IN ('queued', 'running'));
            ELSE
                DELETE FROM task_instance_history d
                WHERE d.id IN (SELECT h.id FROM task_instance_history h
                               WHERE h.end_date < v_cutoff
                                 AND NOT EXISTS (SELECT 1 FROM dag_run r WHERE r.dag_id = h.dag_id AND r.run_id = h.run_id
                                                                           AND r.state IN ('queued', 'running'))
                               LIMIT v_batch FOR UPDATE SKIP LOCKED);
                GET DIAGNOSTICS v_rows = ROW_COUNT;
            END IF;
        ELSIF v_table = 'trigger' THEN
            IF p_dry_run THEN
                SELECT count(*) INTO v_rows FROM trigger g
                WHERE g.fired_at < v_cutoff
                  AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.trigger_id = g.id AND NOT ti.state = ANY (c_done));
            ELSE
                DELETE FROM trigger d
                WHERE d.id IN (SELECT g.id FROM trigger g
                               WHERE g.fired_at < v_cutoff
                                 AND NOT EXISTS (SELECT 1 FROM task_instance ti
                                                 WHERE ti.trigger_id = g.id AND NOT ti.state = ANY (c_done))
                               LIMIT v_batch FOR UPDATE SKIP LOCKED);
                GET DIAGNOSTICS v_rows = ROW_COUNT;
            END IF;
        ELSIF v_table = 'job' THEN
            IF p_dry_run THEN
                SELECT count(*) INTO v_rows FROM job j
                WHERE j.state <> 'running' AND j.end_date < v_cutoff
                  AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.worker_job_id = j.id AND NOT ti.state = ANY (c_done))
                  AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.state = 'queued' AND ti.queued_by_job_id = j.id)
                  AND NOT EXISTS (SELECT 1 FROM trigger g WHERE g.fired_at IS NULL AND g.triggerer_job_id = j.id);
            ELSE
                DELETE FROM job d
                WHERE d.id IN (SELECT j.id FROM job j
                               WHERE j.state <> 'running' AND j.end_date < v_cutoff
                                 AND NOT EXISTS (SELECT 1 FROM task_instance ti
                                                 WHERE ti.worker_job_id = j.id AND NOT ti.state = ANY (c_done))
                                 AND NOT EXISTS (SELECT 1 FROM task_instance ti
                                                 WHERE ti.state = 'queued' AND ti.queued_by_job_id = j.id)
                                 AND NOT EXISTS (SELECT 1 FROM trigger g WHERE g.fired_at IS NULL AND g.triggerer_job_id = j.id)
                               LIMIT v_batch FOR UPDATE SKIP LOCKED)
                  AND d.state <> 'running'
                  AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.worker_job_id = d.id AND NOT ti.state = ANY (c_done))
                  AND NOT EXISTS (SELECT 1 FROM task_instance ti WHERE ti.state = 'queued' AND ti.queued_by_job_id = d.id)
                  AND NOT EXISTS (SELECT 1 FROM trigger g WHERE g.fired_at IS NULL AND g.triggerer_job_id = d.id);
                GET DIAGNOSTICS v_rows = ROW_COUNT;
            END IF;
        ELSE  -- tick_log
            IF p_dry_run THEN
                SELECT count(*) INTO v_rows FROM tick_log t WHERE t.started_at < v_cutoff;
            ELSE
                DELETE FROM tick_log d
                WHERE d.id IN (SELECT t.id FROM tick_log t WHERE t.started_at < v_cutoff
                               LIMIT v_batch FOR UPDATE SKIP LOCKED);
                GET DIAGNOSTICS v_rows = ROW_COUNT;
            END IF;
        END IF;
        ran := true;
        table_name := v_table;
        deleted := v_rows;
        more := NOT p_dry_run AND v_rows >= v_batch;
        v_more := v_more OR more;
        RETURN NEXT;
    END LOOP;

    IF NOT p_dry_run AND NOT v_more AND p_table IS NULL THEN
        UPDATE scheduler_lock SET last_run_at = v_now WHERE name = 'db_clean';
    END IF;
END;
$$;
