-- pending_work_v1(queues): how many TIs of these queues of the database-queue executor are
-- queued or running (`engine worker --burst` stops at 0). Reads only. MySQL: queues arrive as
-- a JSON array.
CREATE FUNCTION pending_work_v1(p_queues JSON)
RETURNS BIGINT
NOT DETERMINISTIC READS SQL DATA
BEGIN
    RETURN (SELECT COUNT(*) FROM task_instance
            WHERE state IN ('queued', 'running') AND executor = 'default'
              AND queue IN (SELECT q.queue FROM JSON_TABLE(p_queues, '$[*]' COLUMNS (
                                queue VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) q));
END
