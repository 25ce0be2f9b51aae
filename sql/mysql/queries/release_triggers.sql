-- A triggerer that stops cleanly hands its waiting triggers back: another claims them at once.
UPDATE `trigger` SET triggerer_job_id = NULL WHERE triggerer_job_id = :job_id AND fired_at IS NULL
