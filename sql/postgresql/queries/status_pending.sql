-- Why scheduled TIs wait, most common reason first (view pending_counts: pending_reasons counted
-- per group of TIs; JIT off for this transaction: compiling the plan cost more than running it,
-- 1-3 s at 1,000,000 scheduled TIs, see docs/operations.md "Metrics").
SELECT set_config('jit', 'off', true);
SELECT reason, sum(tis)::bigint AS tis, min(pool) AS example_pool FROM pending_counts
GROUP BY reason ORDER BY sum(tis) DESC, reason
