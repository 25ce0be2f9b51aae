-- Calls and time per routine of the schema since the statistics were last reset, as the server
-- counts them (pg_stat_user_functions: only while track_functions is 'pl' or 'all').
SELECT s.funcname AS name, sum(s.calls) AS calls, sum(s.total_time) AS total_ms
FROM pg_stat_user_functions s
WHERE s.schemaname = current_schema()
GROUP BY s.funcname
