SELECT pool, slots, used_slots, open_slots, scheduled_tis FROM pool_usage ORDER BY pool
