-- recent_ticks: the last 50 scheduler passes, newest first: the steps that were busy (another
-- scheduler held their lock) and those that failed as a whole (errors).
CREATE VIEW recent_ticks AS
SELECT t.id, t.job_id, t.hostname, t.started_at, t.duration_ms, t.runs_created, t.runs_started,
       t.tis_scheduled, t.tis_queued, t.runs_finished, t.busy, t.errors
FROM tick_log t
ORDER BY t.id DESC
LIMIT 50;
