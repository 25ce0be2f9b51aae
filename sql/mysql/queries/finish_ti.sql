SELECT finish_ti_v3(:ti_id, :try_number, :exit_code, :timed_out, :reason, :now, NULL, NULL) AS state
