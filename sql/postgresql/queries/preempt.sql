SELECT * FROM preempt_v1(:now, :cooldown, :max_per_pass, :min_runtime)
