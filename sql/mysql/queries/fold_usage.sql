-- The usage counters' fold (fold_usage_v2: read sql/mysql/fold_usage_v2.sql), as a step of its
-- own: for a scheduler whose queue_tis does not fold, i.e. one pinned to queue_tis_v1..v5
-- (engine.calls; v6 and later fold in each call that has work). Without it usage_delta would
-- grow while only such schedulers run.
-- Under the queue_tis lock, as the fold requires: NOWAIT (MariaDB reports a held row as error
-- 1205 at once, MySQL 8 as 3572), so the step is busy at once when another scheduler holds it.
SELECT 1 FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE NOWAIT;
CALL fold_usage_v2(@engine_folded);
SELECT @engine_folded AS n
