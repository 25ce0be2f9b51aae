CALL schedule_tis_v2(:now, :batch)
