-- A scheduler, worker or triggerer process announces itself.
-- MySQL: no INSERT ... RETURNING; LAST_INSERT_ID() is per connection.
INSERT INTO job (kind, hostname, pid, state, start_date, latest_heartbeat)
VALUES (:kind, :hostname, :pid, 'running', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6));
SELECT CAST(LAST_INSERT_ID() AS SIGNED) AS id
