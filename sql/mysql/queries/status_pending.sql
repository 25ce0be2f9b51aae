-- Why scheduled TIs wait, most common reason first (view pending_reasons).
SELECT reason, count(*) AS tis, min(pool) AS example_pool FROM pending_reasons
GROUP BY reason ORDER BY count(*) DESC, reason
