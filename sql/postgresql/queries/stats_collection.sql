-- Whether the server counts calls of PL/pgSQL functions (pg_stat_user_functions).
SELECT current_setting('track_functions') IN ('pl', 'all') AS collected,
       'track_functions = ' || current_setting('track_functions') AS setting
