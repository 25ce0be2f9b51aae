-- Every routine of the database with its argument types and result (engine.calls moves a
-- service to another version of a procedure only when these match).
-- One join, grouped (not a subquery per routine): MariaDB answers each read of
-- information_schema.parameters by reading every routine's definition, so a correlated
-- subquery cost ~2 s with ~350 routines on the server; this reads them once (~70 ms).
SELECT r.routine_name AS name,
       GROUP_CONCAT(CONCAT_WS(' ', p.parameter_mode, p.dtd_identifier) ORDER BY p.ordinal_position SEPARATOR ', ')
           AS args,
       CONCAT_WS(' ', r.routine_type, r.dtd_identifier) AS result
FROM information_schema.routines r
LEFT JOIN information_schema.parameters p
       ON p.specific_schema = DATABASE() AND p.specific_name = r.specific_name
      AND p.routine_type = r.routine_type AND p.ordinal_position > 0
WHERE r.routine_schema = DATABASE()
GROUP BY r.routine_name, r.routine_type, r.dtd_identifier
