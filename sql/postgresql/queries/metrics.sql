SELECT metric, pool, queue, state, reason, kind, value FROM metrics
