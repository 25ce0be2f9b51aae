-- Corrections for every partition where the usage counters differ from a recount (usage_drift).
CALL recount_usage_v1(@engine_recounted);
SELECT @engine_recounted AS n
