-- result bool: taken
-- The lock of migrations: `engine db upgrade` and `engine db downgrade` (and the first start on an
-- embedded database, which upgrades it) hold it on a connection of their own for the whole
-- migration and repair, so two at once (services started together after a package upgrade) run
-- one after the other and the second finds nothing left to do. A session-level advisory lock
-- (released when the connection ends, a killed process's too), keyed by the deployment's schema:
-- deployments in other schemas of the database migrate on their own. Waits up to :wait_ms
-- milliseconds (lock_timeout, for this session: engine.migrate closes it afterwards), then fails
-- with 55P03. A waiter shows in pg_locks (locktype 'advisory', not granted).
-- (1835626082: a constant of this engine, the first key for every deployment.)
SELECT set_config('lock_timeout', :wait_ms, false);
SELECT true AS taken FROM (SELECT pg_advisory_lock(1835626082, hashtext(current_schema()))) x
