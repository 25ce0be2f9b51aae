-- The database clock (the triggerer measures its host's offset from it): the statement's time.
SELECT UTC_TIMESTAMP(6) AS db_now
