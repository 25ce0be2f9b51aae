-- result json: env op_kwargs map_args conf next_kwargs event
CALL claim_tis_v5(:job_id, :hostname, :queues, :limit, :log_dir, :now)
