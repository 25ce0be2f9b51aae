SELECT * FROM preempt_v2(:now, :cooldown, :max_per_pass, :min_runtime)
