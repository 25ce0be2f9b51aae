-- Write one DAG definition. A changed schedule, time zone or start date restarts the cron bookkeeping
-- (create_dag_runs_v1 recomputes next_dagrun; run ids are unique, so no run is duplicated).
-- MySQL: ON DUPLICATE KEY UPDATE for ON CONFLICT; its assignments run left to right and each
-- sees the ones before it, so next_dagrun and next_dagrun_create_after, which compare the old
-- schedule and start_date with the new, come first. <=> is IS NOT DISTINCT FROM. VALUES(col):
-- see pools_set.sql. start_date comes as ISO-8601 UTC text ('2026-01-01T00:00:00+00:00', engine.dag):
-- DATETIME takes it without the offset.
INSERT INTO dag (dag_id, fileloc, description, schedule, timezone, start_date, catchup, max_active_runs,
                 max_active_tasks, is_paused, is_active, tags, serialized, last_synced_at)
VALUES (:dag_id, :fileloc, :description, :schedule, :timezone,
        CAST(REPLACE(LEFT(:start_date, LENGTH(:start_date) - 6), 'T', ' ') AS DATETIME(6)), :catchup, :max_active_runs,
        :max_active_tasks, :is_paused, true, :tags, :serialized, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    next_dagrun = CASE WHEN NOT (schedule <=> VALUES(schedule)) OR NOT (timezone <=> VALUES(timezone))
                         OR NOT (start_date <=> VALUES(start_date))
                       THEN NULL ELSE next_dagrun END,
    next_dagrun_create_after = CASE WHEN NOT (schedule <=> VALUES(schedule))
                                      OR NOT (timezone <=> VALUES(timezone))
                                      OR NOT (start_date <=> VALUES(start_date))
                                    THEN NULL ELSE next_dagrun_create_after END,
    fileloc = VALUES(fileloc),
    description = VALUES(description),
    schedule = VALUES(schedule),
    timezone = VALUES(timezone),
    start_date = VALUES(start_date),
    catchup = VALUES(catchup),
    max_active_runs = VALUES(max_active_runs),
    max_active_tasks = VALUES(max_active_tasks),
    is_active = true,
    tags = VALUES(tags),
    serialized = VALUES(serialized),
    last_synced_at = VALUES(last_synced_at),
    error_step = NULL, error = NULL, error_at = NULL  -- a new definition: earlier failures no longer apply
