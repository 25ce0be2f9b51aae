CALL backfill_v1(:dag_id, :start, :end, :max_active, :rerun_failed, :now)
