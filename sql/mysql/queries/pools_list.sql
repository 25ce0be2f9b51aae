-- result bool: include_deferred
SELECT pool, slots, include_deferred, used_slots, open_slots, queued_slots, running_slots, deferred_slots, scheduled_tis
FROM pool_usage ORDER BY pool
