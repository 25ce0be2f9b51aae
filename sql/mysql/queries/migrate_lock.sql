-- result bool: taken
-- The lock of migrations: `engine db upgrade` and `engine db downgrade` hold it on a connection of
-- their own for the whole migration and repair, so two at once (services started together after a
-- package upgrade) run one after the other and the second finds nothing left to do (MySQL/MariaDB
-- commit DDL statement by statement: without it the second ran parts of a migration again). A
-- named user lock (released when the connection ends, a killed process's too), one per database:
-- a fixed prefix and the database name's MD5 (a lock name holds at most 64 characters). Waits up
-- to :wait_s seconds; taken is false after that. A waiter shows in the process list (state 'User lock').
SELECT GET_LOCK(CONCAT('engine_migrate_', MD5(DATABASE())), :wait_s) = 1 AS taken
