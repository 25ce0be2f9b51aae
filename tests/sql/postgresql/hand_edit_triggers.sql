-- A DBA's hand edits of the engine's triggers: one disabled, one dropped, one of the DBA's own.
ALTER TABLE task_instance DISABLE TRIGGER usage_ti_update;
DROP TRIGGER usage_pool ON pool;
CREATE FUNCTION dba_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER dba_audit AFTER INSERT ON dag_run FOR EACH ROW EXECUTE FUNCTION dba_audit_fn();
