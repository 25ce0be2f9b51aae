-- A worker reports how a try ended, with the try's result (JSON text or NULL) and the setting
-- max_result_bytes (finish_ti_v3).
SELECT finish_ti_v3(:ti_id, :try_number, :exit_code, :timed_out, :reason, :now, :result, :max_bytes) AS state
