-- The scheduler's statistics step (analyze_stale_v1), before schedule_tis in every pass.
SELECT * FROM analyze_stale_v1(:fraction, :min_rows)
