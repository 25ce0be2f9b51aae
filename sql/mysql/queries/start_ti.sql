-- result json: env op_kwargs map_args conf next_kwargs event
CALL start_ti_v1(:ti_id, :token, :job_id, :hostname, :log_dir, :now)
