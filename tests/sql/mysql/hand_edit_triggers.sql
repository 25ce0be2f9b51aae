-- A DBA's hand edits of the engine's triggers: usage_ti_update made again as revision 0020 made it
-- (without revision 0033's condition, and now firing after stamp_scheduled_update), a trigger
-- dropped, and one of the DBA's own.
DROP TRIGGER usage_ti_update;
CREATE TRIGGER usage_ti_update AFTER UPDATE ON task_instance FOR EACH ROW CALL track_usage_v1(OLD.state, OLD.dag_run_id, OLD.dag_id, OLD.task_id, OLD.pool, OLD.executor, OLD.pool_slots, NEW.state, NEW.dag_run_id, NEW.dag_id, NEW.task_id, NEW.pool, NEW.executor, NEW.pool_slots);
DROP TRIGGER usage_pool_delete;
CREATE TRIGGER dba_audit AFTER INSERT ON dag_run FOR EACH ROW SET @dba_audit_last = NEW.id;
