CALL schedule_tis_v3(:now, :batch)
