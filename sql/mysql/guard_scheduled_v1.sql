-- guard_scheduled_v1(): on MySQL/MariaDB, what the trigger stamp_scheduled_update (AFTER UPDATE ON
-- task_instance FOR EACH ROW; revision 0045) calls when a TI that was scheduled stays scheduled
-- and its pool, pool_slots, executor, priority_weight, run_after, dag_run_id, dag_id or task_id
-- changes, before it calls stamp_scheduled_v2.
-- Why: queue_tis locks no TI it considers. A call decides on the columns above as it read them,
-- and its final UPDATE checks only that each chosen TI is still scheduled, so an edit committed
-- while a call runs could have the call queue the TI against its old pool's (or executor's, run's,
-- task's) room: the new one exceeded by that TI until it ends. On MySQL/MariaDB a logged TI
-- (queue_skip_log) whose key moved past its skip entry's bound in that moment also failed the
-- call with 1062 (queue_tis_v18's step 1a met it in the page it had read later). The engine never
-- changes those columns of a scheduled TI (map_index is left out: schedule_tis_v3 numbers a
-- mapped TI it has just scheduled, which no call has seen); a DBA's UPDATE does, and this makes
-- it exact.
-- LOCK: the row scheduler_lock('queue_tis') shared (LOCK IN SHARE MODE), until the editor
-- commits: the edit waits for a queue_tis call in flight (which holds it FOR UPDATE), and a call
-- that starts meanwhile finds it busy (SKIP LOCKED: error 3572, the scheduler tries again next
-- pass). Taken before the pool's gate (stamp_scheduled_v2), in the order a call takes them. The
-- TI's row is locked already, so an edit of a TI the call in flight is queuing deadlocks with it;
-- InnoDB rolls one of the two back (1213). INVARIANT: no queue_tis call decides on a value of
-- those columns that a transaction committing during the call changed. CALLERS MAY ASSUME:
-- nothing; the server calls it. Services never wait here.
CREATE PROCEDURE guard_scheduled_v1()
BEGIN
    DECLARE v_n INT;
    SELECT COUNT(*) INTO v_n FROM scheduler_lock l WHERE l.name = 'queue_tis' LOCK IN SHARE MODE;
END
