-- A scheduler, worker or triggerer process announces itself.
INSERT INTO job (kind, hostname, pid, state, start_date, latest_heartbeat)
VALUES (:kind, :hostname, :pid, 'running', now(), now())
RETURNING id
