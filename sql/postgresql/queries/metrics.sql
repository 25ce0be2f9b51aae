-- JIT off for this transaction: the view's plan is large and cheap to run, and compiling it cost
-- more than running it (3.5 s of 4.3 at 1,000,000 scheduled TIs; docs/operations.md "Metrics").
SELECT set_config('jit', 'off', true);
SELECT metric, pool, queue, state, reason, kind, value FROM metrics
