INSERT INTO pool (name, slots, include_deferred, description, preempt_margin)
VALUES (:name, :slots, :include_deferred, :description, :preempt_margin)
ON CONFLICT (name) DO UPDATE SET slots = excluded.slots, include_deferred = excluded.include_deferred,
    preempt_margin = excluded.preempt_margin,
    description = coalesce(excluded.description, pool.description)
