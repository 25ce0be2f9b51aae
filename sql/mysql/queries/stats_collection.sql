-- result bool: collected
-- Whether the server counts calls of stored programs (performance_schema).
SELECT @@performance_schema = 1 AS collected, CONCAT('performance_schema = ', IF(@@performance_schema, 'ON', 'OFF')) AS setting
