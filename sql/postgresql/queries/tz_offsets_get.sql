-- The periods of one time zone as tz_offset holds them (engine.timezones.store compares them
-- with zoneinfo's before writing).
SELECT utc_from, utc_offset FROM tz_offset WHERE zone = :zone ORDER BY utc_from
