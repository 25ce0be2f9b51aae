INSERT INTO pool (name, slots, include_deferred, description)
VALUES (:name, :slots, :include_deferred, :description)
ON CONFLICT (name) DO UPDATE SET slots = excluded.slots, include_deferred = excluded.include_deferred,
    description = coalesce(excluded.description, pool.description)
