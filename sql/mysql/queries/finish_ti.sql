SELECT finish_ti_v2(:ti_id, :try_number, :exit_code, :timed_out, :reason, :now) AS state
