SELECT * FROM clear_tis_v3(:dag_id, CAST(:run_id AS text), CAST(:task_regex AS text), :downstream, :upstream,
                           :only_failed, :dry_run, CAST(:reason AS text), :now)
