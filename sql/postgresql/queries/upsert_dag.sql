-- Write one DAG definition. A changed schedule, time zone or start date restarts the cron bookkeeping
-- (create_dag_runs_v1 recomputes next_dagrun; run ids are unique, so no run is duplicated).
INSERT INTO dag (dag_id, fileloc, description, schedule, timezone, start_date, catchup, max_active_runs,
                 max_active_tasks, is_paused, is_active, tags, serialized, last_synced_at)
VALUES (:dag_id, :fileloc, :description, :schedule, :timezone, :start_date, :catchup, :max_active_runs,
        :max_active_tasks, :is_paused, true, CAST(:tags AS jsonb), CAST(:serialized AS jsonb), now())
ON CONFLICT (dag_id) DO UPDATE SET
    fileloc = excluded.fileloc,
    description = excluded.description,
    schedule = excluded.schedule,
    timezone = excluded.timezone,
    start_date = excluded.start_date,
    catchup = excluded.catchup,
    max_active_runs = excluded.max_active_runs,
    max_active_tasks = excluded.max_active_tasks,
    is_active = true,
    tags = excluded.tags,
    serialized = excluded.serialized,
    last_synced_at = excluded.last_synced_at,
    error_step = NULL, error = NULL, error_at = NULL,  -- a new definition: earlier failures no longer apply
    next_dagrun = CASE WHEN dag.schedule IS DISTINCT FROM excluded.schedule
                         OR dag.timezone IS DISTINCT FROM excluded.timezone
                         OR dag.start_date IS DISTINCT FROM excluded.start_date
                       THEN NULL ELSE dag.next_dagrun END,
    next_dagrun_create_after = CASE WHEN dag.schedule IS DISTINCT FROM excluded.schedule
                                     OR dag.timezone IS DISTINCT FROM excluded.timezone
                                     OR dag.start_date IS DISTINCT FROM excluded.start_date
                                   THEN NULL ELSE dag.next_dagrun_create_after END
