-- A worker reports every try that ended since its last report in one call (finish_tis_v1; v2
-- and v3 decide the batch set-based, v2 on PostgreSQL only, v3 on both dialects):
-- JSON arrays of TI ids, try numbers, exit codes, timed_out flags, reasons and results (JSON
-- text or null), one element per try, and the setting max_result_bytes.
CALL finish_tis_v3(:ti_ids, :try_numbers, :exit_codes, :timed_outs, :reasons, :results, :now, :max_bytes)
