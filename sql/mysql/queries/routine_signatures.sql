-- Every routine of the database with its argument types and result (engine.calls moves a
-- service to another version of a procedure only when these match).
SELECT r.routine_name AS name,
       (SELECT GROUP_CONCAT(CONCAT_WS(' ', p.parameter_mode, p.dtd_identifier) ORDER BY p.ordinal_position SEPARATOR ', ')
          FROM information_schema.parameters p
         WHERE p.specific_schema = r.routine_schema AND p.specific_name = r.specific_name
           AND p.routine_type = r.routine_type AND p.ordinal_position > 0) AS args,
       CONCAT_WS(' ', r.routine_type, r.dtd_identifier) AS result
FROM information_schema.routines r
WHERE r.routine_schema = DATABASE()
