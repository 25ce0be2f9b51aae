INSERT INTO task (dag_id, task_id, kind, bash_command, env, python_callable, op_kwargs, pool, pool_slots,
                  priority_weight, weight_rule, queue, executor, retries, retry_delay,
                  retry_exponential_backoff, max_retry_delay, execution_timeout, trigger_rule,
                  max_active_tis_per_dag, max_active_tis_per_dagrun, expand, map_count, map_upstream, inputs, preemptible, is_active)
VALUES (:dag_id, :task_id, :kind, :bash_command, CAST(:env AS jsonb), :python_callable, CAST(:op_kwargs AS jsonb),
        :pool, :pool_slots, :priority_weight, :weight_rule, :queue, :executor, :retries, :retry_delay,
        :retry_exponential_backoff, :max_retry_delay, :execution_timeout, :trigger_rule,
        :max_active_tis_per_dag, :max_active_tis_per_dagrun, CAST(:expand AS jsonb), :map_count, :map_upstream,
        CAST(:inputs AS jsonb), :preemptible, true)
ON CONFLICT (dag_id, task_id) DO UPDATE SET
    kind = excluded.kind, bash_command = excluded.bash_command, env = excluded.env,
    python_callable = excluded.python_callable, op_kwargs = excluded.op_kwargs, pool = excluded.pool,
    pool_slots = excluded.pool_slots, priority_weight = excluded.priority_weight,
    weight_rule = excluded.weight_rule, queue = excluded.queue, executor = excluded.executor,
    retries = excluded.retries, retry_delay = excluded.retry_delay,
    retry_exponential_backoff = excluded.retry_exponential_backoff,
    max_retry_delay = excluded.max_retry_delay, execution_timeout = excluded.execution_timeout,
    trigger_rule = excluded.trigger_rule, max_active_tis_per_dag = excluded.max_active_tis_per_dag,
    max_active_tis_per_dagrun = excluded.max_active_tis_per_dagrun, expand = excluded.expand,
    map_count = excluded.map_count, map_upstream = excluded.map_upstream, inputs = excluded.inputs,
    preemptible = excluded.preemptible, is_active = true
