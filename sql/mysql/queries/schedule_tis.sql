CALL schedule_tis_v1(:now, :batch)
