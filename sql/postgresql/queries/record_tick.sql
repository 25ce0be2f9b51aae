-- started_at by the database clock (the pass ended at about now()), like every timestamp.
INSERT INTO tick_log (job_id, hostname, started_at, duration_ms, runs_created, runs_started,
                      tis_scheduled, tis_queued, tis_preempted, runs_finished, busy, errors)
VALUES (:job_id, :hostname, now() - make_interval(secs => CAST(:duration_ms AS double precision) / 1000), :duration_ms, :runs_created, :runs_started,
        :tis_scheduled, :tis_queued, :tis_preempted, :runs_finished, :busy, :errors)
