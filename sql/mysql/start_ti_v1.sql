-- start_ti_v1(ti_id, token, job_id, hostname, log_dir, now): a worker of a dispatching executor
-- (e.g. a Celery worker) received the message (ti_id, token) sent by dispatch_tis_v1 and
-- starts the try, as claim_tis_v2 does for the database queue: state `running`, try_number + 1
-- (a resume continues its try), owner job, heartbeat and log path stamped; the TI's
-- ti_dispatch row is deleted. It starts only if the TI is still `queued`, in the queued period
-- the message was sent for, and `token` is the TI's current dispatch token. A late, duplicate
-- or redelivered message (the try already started, the TI was re-sent with a new token,
-- requeued, cleared, cancelled) returns no row and changes nothing: the caller drops it.
--
-- Lock: the task_instance row, FOR UPDATE (waits for a concurrent start of the same TI, which
-- then leaves it `running`: the second start sees that and returns nothing), then its
-- ti_dispatch row (deleted).
-- Invariant: queued -> running only, for the current token only, so at most one try of a
-- queued period ever starts however often its messages are delivered; the TI keeps its slots.
-- Callers may assume: a returned row is theirs to run and report exactly as a row of
-- claim_tis_v2 (same columns; try_number is the try to report to finish_ti / defer_ti);
-- log_path is under p_log_dir whatever the ids hold.
--
-- MySQL: a PROCEDURE whose final SELECT returns the started row (or none). The check reads the
-- TI row FOR UPDATE first (alone: MariaDB has no FOR UPDATE OF), then the token; the values
-- before the update (try_number, start_date, next_method, next_kwargs) are kept in variables,
-- as claim_tis_v2 keeps them in its temporary table. `trigger` is a reserved word: quoted.
CREATE PROCEDURE start_ti_v1(IN p_ti_id BIGINT, IN p_token VARCHAR(64), IN p_job_id BIGINT,
                             IN p_hostname VARCHAR(250), IN p_log_dir TEXT, IN p_now DATETIME(6))
BEGIN
    DECLARE v_now     DATETIME(6);
    DECLARE v_try     INT;
    DECLARE v_start   DATETIME(6);
    DECLARE v_queued  DATETIME(6);
    DECLARE v_method  VARCHAR(250);
    DECLARE v_kwargs  JSON;
    DECLARE v_trigger BIGINT;
    DECLARE v_new     INT;
    DECLARE v_ok      INT DEFAULT 0;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_try = NULL;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    SELECT ti.try_number, ti.start_date, ti.queued_at, ti.next_method, ti.next_kwargs, ti.trigger_id
    INTO v_try, v_start, v_queued, v_method, v_kwargs, v_trigger
    FROM task_instance ti WHERE ti.id = p_ti_id AND ti.state = 'queued'
    FOR UPDATE;
    IF v_try IS NOT NULL THEN
        SELECT count(*) INTO v_ok FROM ti_dispatch d
        WHERE d.ti_id = p_ti_id AND d.token = p_token AND d.queued_at <=> v_queued;
    END IF;
    IF v_ok > 0 THEN
        DELETE FROM ti_dispatch WHERE ti_id = p_ti_id;
        SET v_new = CASE WHEN v_method IS NULL THEN 1 ELSE 0 END;
        UPDATE task_instance ti
        SET ti.log_path = CONCAT(p_log_dir, '/', log_path_part_v1('dag_id', ti.dag_id), '/',
                                 log_path_part_v1('run_id', ti.run_id), '/', log_path_part_v1('task_id', ti.task_id),
                                 CASE WHEN ti.map_index >= 0 THEN CONCAT('/map_index=', ti.map_index) ELSE '' END,
                                 '/attempt=', LEAST(v_try + v_new, 2147483647), '.log'),
            ti.state = 'running',
            ti.try_number = LEAST(v_try + v_new, 2147483647),
            ti.start_date = CASE WHEN v_new = 1 THEN v_now ELSE COALESCE(v_start, v_now) END,
            ti.end_date = NULL,
            ti.exit_code = NULL,
            ti.worker_job_id = p_job_id,
            ti.hostname = p_hostname,
            ti.last_heartbeat_at = v_now,
            ti.updated_at = v_now,
            ti.next_method = NULL,
            ti.next_kwargs = NULL
        WHERE ti.id = p_ti_id AND ti.state = 'queued';
    END IF;

    SELECT ti.id AS ti_id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number,
           t.kind, t.bash_command, t.env, t.python_callable, t.op_kwargs,
           CASE WHEN t.expand IS NULL THEN NULL
                ELSE (SELECT JSON_OBJECTAGG(k.arg, JSON_EXTRACT(t.expand, CONCAT('$.', JSON_QUOTE(k.arg), '[',
                                                                                  ti.map_index, ']')))
                      FROM JSON_TABLE(JSON_KEYS(t.expand), '$[*]' COLUMNS (
                               arg VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) k)
           END AS map_args,
           t.execution_timeout, d.fileloc, ti.log_path, r.conf, v_method AS next_method, v_kwargs AS next_kwargs,
           g.event
    FROM task_instance ti
    JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
    JOIN dag_run r ON r.id = ti.dag_run_id
    JOIN dag d ON d.dag_id = ti.dag_id
    LEFT JOIN `trigger` g ON g.id = v_trigger AND v_method IS NOT NULL
    WHERE v_ok > 0 AND ti.id = p_ti_id AND ti.state = 'running' AND ti.worker_job_id <=> p_job_id
      AND ti.updated_at = v_now;
END
