-- A clean shutdown: the job is finished, not dead (finish_job_v1).
SELECT finish_job_v1(:job_id) AS finished
