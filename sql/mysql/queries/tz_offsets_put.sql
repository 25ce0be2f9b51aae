-- Replace the periods of one time zone (engine.timezones.store, inside `dags sync`'s
-- transaction). ON DUPLICATE KEY: a sync running at the same time that wrote the same zone first.
-- MySQL: utc_froms and offsets arrive as JSON arrays, zipped by position; the instants as
-- ISO-8601 UTC text ('2026-03-29T01:00:00+00:00'): DATETIME takes them without the offset.
DELETE FROM tz_offset WHERE zone = :zone;
INSERT INTO tz_offset (zone, utc_from, utc_offset)
SELECT :zone, CAST(REPLACE(LEFT(f.utc_from, 19), 'T', ' ') AS DATETIME(6)), o.utc_offset
FROM JSON_TABLE(:utc_froms, '$[*]' COLUMNS (n FOR ORDINALITY, utc_from VARCHAR(40) PATH '$')) f
JOIN JSON_TABLE(:offsets, '$[*]' COLUMNS (n FOR ORDINALITY, utc_offset INT PATH '$')) o ON o.n = f.n
ON DUPLICATE KEY UPDATE utc_offset = VALUES(utc_offset)
