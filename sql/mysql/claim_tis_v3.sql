-- claim_tis_v3(job_id, hostname, queues, limit, log_dir, now): claim_tis_v2 (below: the same
-- arguments, result, lock and invariant) that reads only the TIs it claims. Why and what it
-- promises with several queues: sql/postgresql/claim_tis_v3.sql. v2's cursor over `queue IN
-- (...) ORDER BY ... LIMIT n FOR UPDATE SKIP LOCKED` read, sorted and (InnoDB, for the sort)
-- locked every queued TI of the worker's queues until the claim committed, so workers claiming
-- at once passed over each other's whole backlog. v3 opens one locking cursor per queue of the
-- worker (distinct names from the JSON array), reading the index task_instance_claim (state,
-- queue, priority_weight DESC, queued_at, id) in order, at most `limit` rows each, then keeps
-- the first `limit` of them by (priority_weight DESC, queued_at, id).
--
-- claim_tis_v3(job_id, hostname, queues, limit, log_dir, now): a worker of the database-queue
-- executor ('default') takes up to `limit` queued TIs of its queues, highest priority first,
-- and starts a new try of each: state `running`, try_number + 1, owner and log path stamped.
-- A resume (next_method set: its trigger fired) continues its try instead: same try_number,
-- start_date and log; the row carries next_method, next_kwargs and the trigger's event, and the
-- TI's next_method/next_kwargs are cleared (a later retry starts from the beginning).
--
-- Lock: the claimed task_instance rows, FOR UPDATE SKIP LOCKED: workers never wait for each
-- other and never take the same TI (a TI claimed by one is invisible to the others).
-- Invariant: queued -> running only; the TI keeps its pool slot (both states count).
-- Callers may assume: every returned row is theirs to run, with try_number as the try to
-- report to finish_ti_v2 (or defer_ti_v2); next_method NULL means run the task from the start;
-- log_path is under p_log_dir whatever the ids hold (below).
--
-- New in v2: the log path is p_log_dir/dag_id=../run_id=../task_id=..[/map_index=N]/attempt=N.log
-- with each id component built by log_path_part_v1: a safe file name of at most 255 bytes for
-- any id (a 250-character id, or a run id written by hand with '/' or '..', gets a prefix and
-- an md5 instead of the raw id), so the path never leaves p_log_dir and every component can be
-- created. The try number saturates at 2,147,483,647 (INT32_MAX) instead of overflowing: a TI
-- stored with that try number is claimed like any other rather than failing every claim.
--
-- MySQL: a PROCEDURE whose final SELECT returns the claimed rows. `queues` is a JSON array
-- (engine.db.run sends lists as JSON) read with JSON_TABLE. No UPDATE ... RETURNING: the ids
-- are claimed by a locking cursor into a session temporary table, updated, then selected back.
-- SKIP LOCKED relies on the engine's READ COMMITTED (docs/dialects.md). The locking cursor reads
-- task_instance alone (MariaDB has no FOR UPDATE OF, and a join would lock task and dag rows).
-- The UPDATE is driven by the temporary table (STRAIGHT_JOIN): only the claimed rows are read
-- and locked. (`id IN (subquery)` is planned by MariaDB 10.11 as a scan of task_instance, and a
-- scan locks the rows other workers just claimed: two workers deadlock.) It takes the old
-- try_number, start_date, next_method and next_kwargs from the temporary table (the values
-- before the update, as PostgreSQL's `claimed` CTE keeps them): in a multi-table UPDATE MySQL does not promise
-- the order of the assignments, and each may see the ones before it (PostgreSQL: the old row).
-- `trigger` is a reserved word in MySQL: quoted.
CREATE PROCEDURE claim_tis_v3(IN p_job_id BIGINT, IN p_hostname VARCHAR(250), IN p_queues JSON, IN p_limit INT,
                              IN p_log_dir TEXT, IN p_now DATETIME(6))
BEGIN
    DECLARE v_now  DATETIME(6);
    DECLARE v_done BOOLEAN DEFAULT FALSE;
    DECLARE v_id   BIGINT;
    DECLARE v_try  INT;
    DECLARE v_start DATETIME(6);
    DECLARE v_method VARCHAR(250);
    DECLARE v_kwargs JSON;
    DECLARE v_trigger BIGINT;
    DECLARE v_queue VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_pw    INT;
    DECLARE v_qat   DATETIME(6);
    DECLARE v_nq    INT DEFAULT 0;
    DECLARE v_qi    INT DEFAULT 0;
    DECLARE c_claim CURSOR FOR  -- one queue (v_queue, read when the cursor opens), in index order
        SELECT ti.id, ti.try_number, ti.start_date, ti.next_method, ti.next_kwargs, ti.trigger_id,
               ti.priority_weight, ti.queued_at
        FROM task_instance ti FORCE INDEX (task_instance_claim)
        WHERE ti.state = 'queued' AND ti.queue = v_queue AND ti.executor = 'default'
        ORDER BY ti.priority_weight DESC, ti.queued_at, ti.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    CREATE TEMPORARY TABLE IF NOT EXISTS claim_tis_v3_ids (
        id BIGINT PRIMARY KEY, try_number INT, start_date DATETIME(6), next_method VARCHAR(250), next_kwargs JSON,
        trigger_id BIGINT, new_try INT, priority_weight INT, queued_at DATETIME(6));
    CREATE TEMPORARY TABLE IF NOT EXISTS claim_tis_v3_queues (
        i INT PRIMARY KEY, queue VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin);
    CREATE TEMPORARY TABLE IF NOT EXISTS claim_tis_v3_keep (id BIGINT PRIMARY KEY);
    DELETE FROM claim_tis_v3_ids;
    DELETE FROM claim_tis_v3_queues;
    INSERT INTO claim_tis_v3_queues (i, queue)
    SELECT ROW_NUMBER() OVER (ORDER BY q.queue), q.queue
    FROM (SELECT DISTINCT j.queue FROM JSON_TABLE(p_queues, '$[*]' COLUMNS (
              queue VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) j) q;
    SELECT COUNT(*) INTO v_nq FROM claim_tis_v3_queues;
    queues: WHILE v_qi < v_nq DO
        SET v_qi = v_qi + 1;
        SELECT q.queue INTO v_queue FROM claim_tis_v3_queues q WHERE q.i = v_qi;
        SET v_done = FALSE;
        OPEN c_claim;
        fetching: LOOP
            FETCH c_claim INTO v_id, v_try, v_start, v_method, v_kwargs, v_trigger, v_pw, v_qat;
            IF v_done THEN
                LEAVE fetching;
            END IF;
            INSERT INTO claim_tis_v3_ids (id, try_number, start_date, next_method, next_kwargs, trigger_id, new_try,
                                          priority_weight, queued_at)
            VALUES (v_id, v_try, v_start, v_method, v_kwargs, v_trigger, CASE WHEN v_method IS NULL THEN 1 ELSE 0 END,
                    v_pw, v_qat);
        END LOOP;
        CLOSE c_claim;
    END WHILE;
    SET v_done = FALSE;
    IF v_nq > 1 THEN  -- keep the first p_limit of all queues' rows (the rest stay queued)
        -- (A temporary table may appear once per statement: the kept ids go through a second one.)
        DELETE FROM claim_tis_v3_keep;
        INSERT INTO claim_tis_v3_keep (id)
        SELECT c.id FROM claim_tis_v3_ids c ORDER BY c.priority_weight DESC, c.queued_at, c.id LIMIT p_limit;
        DELETE c FROM claim_tis_v3_ids c LEFT JOIN claim_tis_v3_keep k ON k.id = c.id WHERE k.id IS NULL;
    END IF;

    UPDATE claim_tis_v3_ids c
    STRAIGHT_JOIN task_instance ti ON c.id = ti.id
    SET ti.log_path = CONCAT(p_log_dir, '/', log_path_part_v1('dag_id', ti.dag_id), '/', log_path_part_v1('run_id', ti.run_id),
                             '/', log_path_part_v1('task_id', ti.task_id),
                             CASE WHEN ti.map_index >= 0 THEN CONCAT('/map_index=', ti.map_index) ELSE '' END,
                             '/attempt=', LEAST(c.try_number + c.new_try, 2147483647), '.log'),
        ti.state = 'running',
        ti.try_number = LEAST(c.try_number + c.new_try, 2147483647),
        ti.start_date = CASE WHEN c.new_try = 1 THEN v_now ELSE COALESCE(c.start_date, v_now) END,
        ti.end_date = NULL,
        ti.exit_code = NULL,
        ti.worker_job_id = p_job_id,
        ti.hostname = p_hostname,
        ti.last_heartbeat_at = v_now,
        ti.updated_at = v_now,
        ti.next_method = NULL,
        ti.next_kwargs = NULL
    WHERE ti.state = 'queued';

    SELECT ti.id AS ti_id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number,
           t.kind, t.bash_command, t.env, t.python_callable, t.op_kwargs,
           CASE WHEN t.expand IS NULL THEN NULL
                ELSE (SELECT JSON_OBJECTAGG(k.arg, JSON_EXTRACT(t.expand, CONCAT('$.', JSON_QUOTE(k.arg), '[',
                                                                                  ti.map_index, ']')))
                      FROM JSON_TABLE(JSON_KEYS(t.expand), '$[*]' COLUMNS (
                               arg VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) k)
           END AS map_args,
           t.execution_timeout, d.fileloc, ti.log_path, r.conf, c.next_method, c.next_kwargs, g.event
    FROM claim_tis_v3_ids c
    JOIN task_instance ti ON ti.id = c.id
    JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
    JOIN dag_run r ON r.id = ti.dag_run_id
    JOIN dag d ON d.dag_id = ti.dag_id
    LEFT JOIN `trigger` g ON g.id = c.trigger_id AND c.next_method IS NOT NULL
    WHERE ti.state = 'running' AND ti.worker_job_id <=> p_job_id AND ti.updated_at = v_now
    ORDER BY ti.priority_weight DESC, ti.queued_at, ti.id;
END
