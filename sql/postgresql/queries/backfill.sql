SELECT * FROM backfill_v2(:dag_id, :start_date, :end_date, CAST(:max_active AS int), :rerun_failed, :now)
