-- A worker reports every try that ended since its last report in one call (finish_tis_v1):
-- JSON arrays of TI ids, try numbers, exit codes, timed_out flags, reasons and results (JSON
-- text or null), one element per try, and the setting max_result_bytes.
CALL finish_tis_v2(:ti_ids, :try_numbers, :exit_codes, :timed_outs, :reasons, :results, :now, :max_bytes)
