-- analyze_stale_v1(fraction, min_rows): keep the planner's statistics of the engine's busiest
-- tables in step with their data. A surge of new runs (a backfill, a burst of triggers, a
-- retention cleanup followed by new work) can change most of task_instance between two
-- autovacuum visits; until the next ANALYZE the planner plans the procedures' statements for
-- the table as it was (issue 11 item 6: schedule_tis took minutes instead of seconds). The
-- scheduler calls this in every pass, before schedule_tis: it ANALYZEs each of task_instance,
-- dag_run, task_instance_history and trigger whose rows inserted, updated or deleted since its
-- last ANALYZE (pg_stat_user_tables.n_mod_since_analyze, by autovacuum or by this function)
-- reach `fraction` of the rows the planner believes it has (pg_class.reltuples) and at least
-- `min_rows`. Returns one row per table analyzed: (table_name, rows_changed, rows_estimated
-- before); nothing when no table is stale. Not time-dependent: no `now`.
--
-- LOCK: the row scheduler_lock('analyze_stale'), FOR UPDATE SKIP LOCKED, held to commit: one
-- scheduler analyzes at a time; another returns at once with nothing (never waits, never
-- "busy"). ANALYZE (SKIP_LOCKED) takes the table's SHARE UPDATE EXCLUSIVE lock, which does not
-- block reads or writes of the table; a table an autovacuum is working on is skipped.
-- INVARIANT: data is never changed; only the planner's statistics of these four tables.
-- CALLERS MAY ASSUME: a call costs one catalog read when nothing is stale; when a table is
-- stale, one ANALYZE of it (a sample of 300 x default_statistics_target rows, whatever the
-- table's size). A role that does not own a table gets PostgreSQL's warning and no ANALYZE of
-- it (PostgreSQL 17: grant it MAINTAIN); the call still succeeds.
CREATE OR REPLACE FUNCTION analyze_stale_v1(p_fraction double precision DEFAULT 0.1, p_min_rows bigint DEFAULT 1000)
RETURNS TABLE (table_name text, rows_changed bigint, rows_estimated bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    c_tables CONSTANT text[] := ARRAY['task_instance', 'dag_run', 'task_instance_history', 'trigger'];
    r record;
BEGIN
    PERFORM 1 FROM scheduler_lock WHERE name = 'analyze_stale' FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    FOR r IN
        SELECT c.relname::text AS t, s.n_mod_since_analyze AS changed, greatest(c.reltuples, 0)::bigint AS est
        FROM pg_class c
        JOIN pg_stat_user_tables s ON s.relid = c.oid
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY (c_tables)
          AND s.n_mod_since_analyze >= greatest(coalesce(p_min_rows, 1000),
                                                greatest(coalesce(p_fraction, 0.1), 0) * greatest(c.reltuples, 0))
        ORDER BY c.relname
    LOOP
        EXECUTE format('ANALYZE (SKIP_LOCKED) %I.%I', current_schema(), r.t);
        table_name := r.t;
        rows_changed := r.changed;
        rows_estimated := r.est;
        RETURN NEXT;
    END LOOP;
END;
$$;
