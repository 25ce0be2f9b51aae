-- A triggerer that stops cleanly hands its waiting triggers back (release_triggers_v1).
SELECT release_triggers_v1(:job_id) AS released
