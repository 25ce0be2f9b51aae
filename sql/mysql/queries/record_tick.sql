-- started_at by the database clock (the pass ended at about now()), like every timestamp.
INSERT INTO tick_log (job_id, hostname, started_at, duration_ms, runs_created, runs_started,
                      tis_scheduled, tis_queued, tis_preempted, runs_finished, busy, errors)
VALUES (:job_id, :hostname, UTC_TIMESTAMP(6) - INTERVAL ROUND(:duration_ms * 1000) MICROSECOND, :duration_ms, :runs_created, :runs_started,
        :tis_scheduled, :tis_queued, :tis_preempted, :runs_finished, :busy, :errors)
