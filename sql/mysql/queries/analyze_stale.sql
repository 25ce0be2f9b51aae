-- The scheduler's statistics step (analyze_stale_v1), before schedule_tis in every pass.
CALL analyze_stale_v1(:fraction, :min_rows)
