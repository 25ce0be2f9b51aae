-- A DBA's addition: a routine of their own (MySQL has no overloads).
CREATE FUNCTION dba_helper() RETURNS INT DETERMINISTIC RETURN 1;
