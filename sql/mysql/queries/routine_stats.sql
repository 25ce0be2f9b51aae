-- Calls and time per stored program of the database since the server started, as the server
-- counts them (performance_schema; empty while performance_schema is OFF). Timers are in
-- picoseconds.
SELECT s.object_name AS name, sum(s.count_star) AS calls, sum(s.sum_timer_wait) / 1e9 AS total_ms
FROM performance_schema.events_statements_summary_by_program s
WHERE s.object_schema = DATABASE()
GROUP BY s.object_name
