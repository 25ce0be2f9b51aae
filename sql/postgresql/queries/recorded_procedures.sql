-- The procedures and views a migration installed (engine.calls: which versions a service may call).
SELECT name FROM procedure_version
