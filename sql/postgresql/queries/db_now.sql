-- The database clock (the triggerer measures its host's offset from it). clock_timestamp(), not
-- now(): now() is when the transaction began.
SELECT clock_timestamp() AS db_now
