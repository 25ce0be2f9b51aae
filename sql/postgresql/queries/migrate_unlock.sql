-- Releases the lock of migrations (migrate_lock.sql) held by this session.
SELECT pg_advisory_unlock(1835626082, hashtext(current_schema()))
