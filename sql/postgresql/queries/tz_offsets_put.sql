-- Replace the periods of one time zone (engine.timezones.store, inside `dags sync`'s
-- transaction). ON CONFLICT: a sync running at the same time that wrote the same zone first.
DELETE FROM tz_offset WHERE zone = :zone;
INSERT INTO tz_offset (zone, utc_from, utc_offset)
SELECT :zone, CAST(p.utc_from AS timestamptz), p.utc_offset
FROM unnest(CAST(:utc_froms AS text[]), CAST(:offsets AS int[])) AS p (utc_from, utc_offset)
ON CONFLICT (zone, utc_from) DO UPDATE SET utc_offset = excluded.utc_offset
