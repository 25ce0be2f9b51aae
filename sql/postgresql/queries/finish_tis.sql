-- A worker reports every try that ended since its last report in one call (finish_tis_v1; v2
-- and v3 decide the batch set-based, v2 on PostgreSQL only, v3 on both dialects):
-- arrays of TI ids, try numbers, exit codes, timed_out flags, reasons and results (JSON text or
-- NULL), one element per try, and the setting max_result_bytes. The NOTIFY (in the same
-- statement: one round trip) wakes a scheduler to evaluate the finished TIs' downstream now
-- (engine/wakeup.py); it is delivered only if this transaction commits.
SELECT f.* FROM pg_notify('engine_scheduler', '') AS n,
    finish_tis_v3(CAST(:ti_ids AS bigint[]), CAST(:try_numbers AS int[]), CAST(:exit_codes AS int[]),
                  CAST(:timed_outs AS boolean[]), CAST(:reasons AS text[]), CAST(:results AS text[]),
                  :now, :max_bytes) AS f
