CALL backfill_v2(:dag_id, :start_date, :end_date, :max_active, :rerun_failed, :now)
