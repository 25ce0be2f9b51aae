SELECT * FROM backfill_v1(:dag_id, :start, :end, CAST(:max_active AS int), :rerun_failed, :now)
