-- previous/0003/claim_tis_v1.sql: claim_tis_v1 as revisions 0001 and 0002 install it and as the
-- downgrade of 0003 puts it back. No MySQL text older than 0003 exists (the MySQL port was
-- written after 0003's changes), so this is sql/mysql/claim_tis_v1.sql with exactly 0003's
-- changes taken out (no resumes: every claim starts a new try; no next_method, next_kwargs,
-- event columns), as `git diff 9f4dc93 ca90e4f -- sql/postgresql/claim_tis_v1.sql` shows them
-- for PostgreSQL (whose text before 0003 is sql/postgresql/previous/0003/claim_tis_v1.sql).
--
-- claim_tis_v1(job_id, hostname, queues, limit, log_dir, now): a worker of the database-queue
-- executor ('default') takes up to `limit` queued TIs of its queues, highest priority first,
-- and starts a new try of each: state `running`, try_number + 1, owner and log path stamped.
--
-- Lock: the claimed task_instance rows, FOR UPDATE SKIP LOCKED: workers never wait for each
-- other and never take the same TI (a TI claimed by one is invisible to the others).
-- Invariant: queued -> running only; the TI keeps its pool slot (both states count).
-- Callers may assume: every returned row is theirs to run, with try_number as the try to
-- report to finish_ti_v1.
--
-- MySQL: a PROCEDURE whose final SELECT returns the claimed rows. `queues` is a JSON array
-- (engine.db.run sends lists as JSON) read with JSON_TABLE. No UPDATE ... RETURNING: the ids
-- are claimed by a locking cursor into a session temporary table, updated, then selected back.
-- SKIP LOCKED relies on the engine's READ COMMITTED (docs/dialects.md). The locking cursor reads
-- task_instance alone (MariaDB has no FOR UPDATE OF, and a join would lock task and dag rows).
-- The UPDATE is driven by the temporary table (STRAIGHT_JOIN): only the claimed rows are read
-- and locked. (`id IN (subquery)` is planned by MariaDB 10.11 as a scan of task_instance, and a
-- scan locks the rows other workers just claimed: two workers deadlock.) It takes the old
-- try_number from the temporary table (the value before the update): in a multi-table UPDATE
-- MySQL does not promise the order of the assignments, and each may see the ones before it
-- (PostgreSQL: the old row). The temporary table is declared exactly as the current
-- claim_tis_v1 declares it (columns this version leaves NULL included): a session that calls
-- both texts, across an upgrade or downgrade, finds the table it expects.
CREATE PROCEDURE claim_tis_v1(IN p_job_id BIGINT, IN p_hostname VARCHAR(250), IN p_queues JSON, IN p_limit INT,
                              IN p_log_dir TEXT, IN p_now DATETIME(6))
BEGIN
    DECLARE v_now  DATETIME(6);
    DECLARE v_done BOOLEAN DEFAULT FALSE;
    DECLARE v_id   BIGINT;
    DECLARE v_try  INT;
    DECLARE c_claim CURSOR FOR
        SELECT ti.id, ti.try_number
        FROM task_instance ti
        WHERE ti.state = 'queued' AND ti.executor = 'default'
          AND ti.queue IN (SELECT q.queue FROM JSON_TABLE(p_queues, '$[*]' COLUMNS (
                               queue VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) q)
        ORDER BY ti.priority_weight DESC, ti.queued_at, ti.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SET v_now = COALESCE(p_now, UTC_TIMESTAMP(6));
    CREATE TEMPORARY TABLE IF NOT EXISTS claim_tis_v1_ids (
        id BIGINT PRIMARY KEY, try_number INT, start_date DATETIME(6), next_method VARCHAR(250), next_kwargs JSON,
        trigger_id BIGINT, new_try INT);
    DELETE FROM claim_tis_v1_ids;
    OPEN c_claim;
    fetching: LOOP
        FETCH c_claim INTO v_id, v_try;
        IF v_done THEN
            LEAVE fetching;
        END IF;
        INSERT INTO claim_tis_v1_ids (id, try_number) VALUES (v_id, v_try);
    END LOOP;
    CLOSE c_claim;

    UPDATE claim_tis_v1_ids c
    STRAIGHT_JOIN task_instance ti ON c.id = ti.id
    SET ti.log_path = CONCAT(p_log_dir, '/dag_id=', ti.dag_id, '/run_id=', ti.run_id, '/task_id=', ti.task_id,
                             CASE WHEN ti.map_index >= 0 THEN CONCAT('/map_index=', ti.map_index) ELSE '' END,
                             '/attempt=', c.try_number + 1, '.log'),
        ti.state = 'running',
        ti.try_number = c.try_number + 1,
        ti.start_date = v_now,
        ti.end_date = NULL,
        ti.exit_code = NULL,
        ti.worker_job_id = p_job_id,
        ti.hostname = p_hostname,
        ti.last_heartbeat_at = v_now,
        ti.updated_at = v_now
    WHERE ti.state = 'queued';

    SELECT ti.id AS ti_id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number,
           t.kind, t.bash_command, t.env, t.python_callable, t.op_kwargs,
           CASE WHEN t.expand IS NULL THEN NULL
                ELSE (SELECT JSON_OBJECTAGG(k.arg, JSON_EXTRACT(t.expand, CONCAT('$.', JSON_QUOTE(k.arg), '[',
                                                                                  ti.map_index, ']')))
                      FROM JSON_TABLE(JSON_KEYS(t.expand), '$[*]' COLUMNS (
                               arg VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) k)
           END AS map_args,
           t.execution_timeout, d.fileloc, ti.log_path, r.conf
    FROM claim_tis_v1_ids c
    JOIN task_instance ti ON ti.id = c.id
    JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
    JOIN dag_run r ON r.id = ti.dag_run_id
    JOIN dag d ON d.dag_id = ti.dag_id
    WHERE ti.state = 'running' AND ti.worker_job_id <=> p_job_id AND ti.updated_at = v_now
    ORDER BY ti.priority_weight DESC, ti.queued_at, ti.id;
END
