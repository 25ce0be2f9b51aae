INSERT INTO tick_log (job_id, hostname, started_at, duration_ms, runs_created, runs_started,
                      tis_scheduled, tis_queued, runs_finished, busy)
VALUES (:job_id, :hostname, :started_at, :duration_ms, :runs_created, :runs_started,
        :tis_scheduled, :tis_queued, :runs_finished, :busy)
