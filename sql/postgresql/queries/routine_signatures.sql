-- Every routine of the schema with its argument types and result (engine.calls moves a service
-- to another version of a procedure only when these match). Oldest definition last.
SELECT p.proname AS name, oidvectortypes(p.proargtypes) AS args, pg_get_function_result(p.oid) AS result
FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace
ORDER BY p.oid DESC
