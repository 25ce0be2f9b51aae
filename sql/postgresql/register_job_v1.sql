-- register_job_v1(kind, hostname, pid, now): a scheduler, worker or triggerer process announces
-- itself; returns its job id. A function (not a plain INSERT) so a worker or triggerer role
-- needs only EXECUTE (engine db roles).
-- Lock: none beyond the new row.
CREATE OR REPLACE FUNCTION register_job_v1(p_kind text, p_hostname text, p_pid int, p_now timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_id  bigint;
BEGIN
    INSERT INTO job (kind, hostname, pid, state, start_date, latest_heartbeat)
    VALUES (p_kind, p_hostname, p_pid, 'running', v_now, v_now)
    RETURNING id INTO v_id;
    RETURN v_id;
END;
$$;
