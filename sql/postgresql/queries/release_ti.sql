SELECT release_ti_v1(:ti_id, :try_number, :reason, :now) AS state
