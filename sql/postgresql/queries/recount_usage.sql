-- Corrections for every partition where the usage counters differ from a recount (usage_drift).
SELECT recount_usage_v1() AS n
