SELECT * FROM preempt_v3(:now, :cooldown, :max_per_pass, :min_runtime)
