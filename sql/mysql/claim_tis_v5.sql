-- claim_tis_v5 (MySQL/MariaDB): claim_tis_v4 (read sql/mysql/claim_tis_v4.sql and claim_tis_v3.sql
-- for the contract, lock and invariant) whose question asks for a queued TI of the database-queue
-- executor ('default'), not of any executor. Revision 0041 put the executor into the claim index
-- (state, queue, executor, priority_weight DESC, queued_at, id), so the question is one index
-- lookup per queue name, and claim_tis_v3's cursor over a queue starts at its first 'default' TI.
-- Before it, a queue holding another executor's queued TIs (a Celery backlog waiting for Celery
-- workers) cost every claim of a database-queue worker of that queue a read of each of them:
-- ~25 ms a poll with 10,000 Celery TIs queued, even when the queue held nothing for it (v4 entered
-- v3 for them).
-- Lock, invariant, callers may assume: claim_tis_v3's; an idle call (no 'default' TI queued in the
-- worker's queues) takes no lock and writes nothing (not even v3's temporary tables).
CREATE PROCEDURE claim_tis_v5(IN p_job_id BIGINT, IN p_hostname VARCHAR(250), IN p_queues JSON, IN p_limit INT,
                              IN p_log_dir TEXT, IN p_now DATETIME(6))
BEGIN
    DECLARE v_any INT DEFAULT 0;

    -- As in v4: the queue names first, then one index lookup each (STRAIGHT_JOIN), read by
    -- SELECT ... INTO (a consistent read, no lock).
    SELECT COUNT(*) INTO v_any
    FROM (SELECT 1
          FROM JSON_TABLE(p_queues, '$[*]' COLUMNS (
                   queue VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) j
          STRAIGHT_JOIN task_instance ti FORCE INDEX (task_instance_claim)
              ON ti.state = 'queued' AND ti.queue = j.queue AND ti.executor = 'default'
          LIMIT 1) z;
    IF v_any = 0 THEN
        SELECT NULL AS ti_id, NULL AS dag_id, NULL AS run_id, NULL AS task_id, NULL AS map_index,
               NULL AS try_number, NULL AS kind, NULL AS bash_command, NULL AS env, NULL AS python_callable,
               NULL AS op_kwargs, NULL AS map_args, NULL AS execution_timeout, NULL AS fileloc, NULL AS log_path,
               NULL AS conf, NULL AS next_method, NULL AS next_kwargs, NULL AS event
        FROM DUAL WHERE FALSE;
    ELSE
        CALL claim_tis_v3(p_job_id, p_hostname, p_queues, p_limit, p_log_dir, p_now);
    END IF;
END
