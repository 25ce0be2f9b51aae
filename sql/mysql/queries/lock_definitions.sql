-- The lock of definitions: scheduler_lock('definitions') FOR UPDATE, held until the caller's
-- transaction ends (waits for a holder; revision 0049). Taken first by every transaction that
-- checks and then writes DAGs, tasks or pools: `engine dags sync` (a DAG's owner file, its tasks'
-- pools and widths, the DAGs its files no longer define, time zones), `engine pools set` (no task
-- wider than the pool) and `engine pools delete` (no task uses it). Their checks read without
-- row locks; this lock makes each check and its write one step against the others.
-- No row back: the lock row is missing (engine.pools.lock_definitions says how to put it back).
SELECT name FROM scheduler_lock WHERE name = 'definitions' FOR UPDATE
