-- A DBA's additions: another overload of an engine function, and a routine of their own.
CREATE FUNCTION heartbeat_v1(p_job_id integer) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION dba_helper() RETURNS integer LANGUAGE sql AS 'SELECT 1';
