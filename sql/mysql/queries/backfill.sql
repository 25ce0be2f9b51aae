CALL backfill_v1(:dag_id, :start_date, :end_date, :max_active, :rerun_failed, :now)
