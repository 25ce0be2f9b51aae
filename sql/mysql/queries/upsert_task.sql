-- MySQL: ON DUPLICATE KEY UPDATE for ON CONFLICT; VALUES(col): see pools_set.sql.
INSERT INTO task (dag_id, task_id, kind, bash_command, env, python_callable, op_kwargs, pool, pool_slots,
                  priority_weight, weight_rule, queue, executor, retries, retry_delay,
                  retry_exponential_backoff, max_retry_delay, execution_timeout, trigger_rule,
                  max_active_tis_per_dag, max_active_tis_per_dagrun, expand, map_count, map_upstream, inputs, preemptible, is_active)
VALUES (:dag_id, :task_id, :kind, :bash_command, :env, :python_callable, :op_kwargs,
        :pool, :pool_slots, :priority_weight, :weight_rule, :queue, :executor, :retries, :retry_delay,
        :retry_exponential_backoff, :max_retry_delay, :execution_timeout, :trigger_rule,
        :max_active_tis_per_dag, :max_active_tis_per_dagrun, :expand, :map_count, :map_upstream, :inputs, :preemptible, true)
ON DUPLICATE KEY UPDATE
    kind = VALUES(kind), bash_command = VALUES(bash_command), env = VALUES(env),
    python_callable = VALUES(python_callable), op_kwargs = VALUES(op_kwargs), pool = VALUES(pool),
    pool_slots = VALUES(pool_slots), priority_weight = VALUES(priority_weight),
    weight_rule = VALUES(weight_rule), queue = VALUES(queue), executor = VALUES(executor),
    retries = VALUES(retries), retry_delay = VALUES(retry_delay),
    retry_exponential_backoff = VALUES(retry_exponential_backoff),
    max_retry_delay = VALUES(max_retry_delay), execution_timeout = VALUES(execution_timeout),
    trigger_rule = VALUES(trigger_rule), max_active_tis_per_dag = VALUES(max_active_tis_per_dag),
    max_active_tis_per_dagrun = VALUES(max_active_tis_per_dagrun), expand = VALUES(expand),
    map_count = VALUES(map_count), map_upstream = VALUES(map_upstream), inputs = VALUES(inputs),
    preemptible = VALUES(preemptible), is_active = true
