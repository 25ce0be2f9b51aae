CALL clear_tis_v4(:dag_id, :run_id, :task_regex, :downstream, :upstream, :only_failed, :dry_run, :reason, :now)
