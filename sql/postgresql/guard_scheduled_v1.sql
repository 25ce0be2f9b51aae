-- guard_scheduled_v1(): the trigger function of guard_scheduled (BEFORE UPDATE ON task_instance
-- FOR EACH ROW, WHEN a TI that was scheduled stays scheduled and its pool, pool_slots, executor,
-- priority_weight, run_after, dag_run_id, dag_id or task_id changes; revision 0045).
-- Why: queue_tis locks no TI it considers. A call decides on the columns above as it read them,
-- and its final UPDATE checks only that each chosen TI is still scheduled, so an edit committed
-- while a call runs could have the call queue the TI against its old pool's (or executor's, run's,
-- task's) room: the new one exceeded by that TI until it ends. The engine never changes those
-- columns of a scheduled TI (map_index is left out: schedule_tis_v3 numbers a mapped TI it has
-- just scheduled, which no call has seen); a DBA's UPDATE does, and this makes it exact.
-- LOCK: the row scheduler_lock('queue_tis') FOR SHARE, until the editor commits: the edit waits
-- for a queue_tis call in flight (which holds it FOR UPDATE), and a call that starts meanwhile
-- finds it busy (NOWAIT: 55P03, the scheduler tries again next pass). The TI's row is locked
-- before a BEFORE trigger runs, so an edit of a TI the call in flight is queuing deadlocks with
-- it; PostgreSQL rolls one of the two back (40P01) after deadlock_timeout. INVARIANT: no
-- queue_tis call decides on a value of those columns that a transaction committing during the
-- call changed. CALLERS MAY ASSUME: nothing; the server calls it. Services never wait here.
CREATE OR REPLACE FUNCTION guard_scheduled_v1() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM 1 FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR SHARE;
    RETURN NEW;
END;
$$;
