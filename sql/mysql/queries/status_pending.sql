-- Why scheduled TIs wait, most common reason first (view pending_counts: pending_reasons counted
-- per group of TIs).
SELECT reason, CAST(SUM(tis) AS SIGNED) AS tis, MIN(pool) AS example_pool FROM pending_counts
GROUP BY reason ORDER BY SUM(tis) DESC, reason
