-- Releases the lock of migrations (migrate_lock.sql) held by this session.
SELECT RELEASE_LOCK(CONCAT('engine_migrate_', MD5(DATABASE())))
