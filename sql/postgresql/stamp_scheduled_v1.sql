-- stamp_scheduled_v1(): the trigger function of stamp_scheduled (BEFORE INSERT OR UPDATE ON
-- task_instance FOR EACH ROW WHEN (NEW.state = 'scheduled'); revision 0026). Every row version of
-- a scheduled TI, written by any client or procedure, carries in sched_xid the id of the
-- transaction that wrote it (pg_current_xact_id(), 64 bits: no wraparound).
-- Why (queue_tis_v11, "SKIPPED PREFIXES"): a transaction whose id is below a snapshot's xmin had
-- ended before that snapshot was taken, so a TI that a call of queue_tis could not see, or that
-- changed since, has sched_xid >= that call's pg_snapshot_xmin(pg_current_snapshot()). The index
-- task_instance_sched_xid (sched_xid) WHERE state = 'scheduled' finds them.
-- LOCK: none beyond the row being written. Only PostgreSQL has it: MySQL/MariaDB offer no
-- transaction id a query can compare with a snapshot, and their queue_tis_v11 calls v10.
CREATE OR REPLACE FUNCTION stamp_scheduled_v1() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.sched_xid := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END;
$$;
