-- queue_tis_v14(max_tis, job_id, now, page_factor): queue_tis_v13's checks, then queue_tis_v11
-- (read sql/postgresql/queue_tis_v11.sql for the contract), with the check for transaction ids
-- from another cluster written so that its plan cannot hinge on an estimate: v13 asked whether
-- any scheduled TI has sched_xid >= the snapshot's xmax with EXISTS, and the generic plan of
-- that (a third of the table estimated to match a parameter) was a sequential scan of
-- task_instance: 63 ms of every call at 520,000 TIs. v14 compares max(sched_xid) over the
-- scheduled TIs, which PostgreSQL reads from the end of the index task_instance_sched_xid (one
-- index entry), and max(seen_xmin) of queue_skip. What follows is v13's description.
--
-- queue_tis_v13(max_tis, job_id, now, page_factor): queue_tis_v11, which it calls (read
-- sql/postgresql/queue_tis_v11.sql for the contract), behind two checks that keep v11's skip
-- entries sound whatever was done to the database:
--   * engine.skip_min that is not a whole number: cleared for the call with a WARNING (as
--     queue_tis_v12 does; v11 would fail on its cast at every call).
--   * TRANSACTION IDS FROM ANOTHER CLUSTER. v11 trusts that a TI written scheduled after an entry
--     was extended carries a sched_xid at or past the entry's seen_xmin. A logical dump restored
--     into another cluster (pg_dump, or a copy of the tables) brings sched_xid and seen_xmin
--     values of the old cluster's transaction ids, which the new cluster's may lie below: TIs
--     written there ahead of a bound would then go unseen while the entry holds. Any entry or
--     scheduled TI stamped at or past the current snapshot's xmax (an id no transaction here has
--     had yet) shows it: then every entry is dropped (always safe: the pools are read in full
--     again) and those TIs are stamped again (the trigger stamps the writing transaction's id).
--     Two reads a call (queue_skip is small; the last entry of task_instance_sched_xid); the
--     writes only happen after such a restore.
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v11 (no lock when there is nothing to
-- decide; otherwise scheduler_lock('queue_tis'), FOR UPDATE NOWAIT: SQLSTATE 55P03 at once when
-- another scheduler holds it). The checks take no lock of their own: dropping entries and
-- stamping TIs again only make v11 read more.
CREATE OR REPLACE FUNCTION queue_tis_v14(p_max_tis int, p_job_id bigint DEFAULT NULL,
                                        p_now timestamptz DEFAULT NULL, p_page_factor int DEFAULT 2)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int,
               try_number int, pool text, queue text, executor text, priority_weight int)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_skip_min text := current_setting('engine.skip_min', true);
    v_xmax bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
BEGIN
    -- (Up to 9 digits: always inside int.)
    IF coalesce(v_skip_min, '') <> '' AND v_skip_min !~ '^\s*[+-]?[0-9]{1,9}\s*$' THEN
        RAISE WARNING 'engine.skip_min = % is not a whole number: queue_tis uses 32; fix it with ALTER DATABASE % SET engine.skip_min = 32 (or RESET engine.skip_min)',
            quote_literal(v_skip_min), quote_ident(current_database());
        PERFORM set_config('engine.skip_min', '', true);
    END IF;
    -- (max() over an index's end: one entry read, whatever the statistics say.)
    IF (SELECT max(s.seen_xmin) FROM queue_skip s) >= v_xmax
       OR (SELECT max(t.sched_xid) FROM task_instance t WHERE t.state = 'scheduled') >= v_xmax THEN
        RAISE WARNING 'queue_tis: transaction ids from another cluster in queue_skip or task_instance.sched_xid (a restored dump?): skip entries dropped, scheduled TIs stamped again';
        DELETE FROM queue_skip_part;
        DELETE FROM queue_skip;
        UPDATE task_instance t SET sched_xid = NULL WHERE t.state = 'scheduled' AND t.sched_xid >= v_xmax;
    END IF;
    RETURN QUERY SELECT * FROM queue_tis_v11(p_max_tis, p_job_id, p_now, p_page_factor);
END;
$$;
