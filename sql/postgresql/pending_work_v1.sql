-- pending_work_v1(queues): how many TIs of these queues of the database-queue executor are
-- queued or running (`engine worker --burst` stops at 0). Reads only.
CREATE OR REPLACE FUNCTION pending_work_v1(p_queues text[])
RETURNS bigint
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN (SELECT count(*) FROM task_instance
            WHERE state IN ('queued', 'running') AND queue = ANY (p_queues) AND executor = 'default');
END;
$$;
