-- task_output_v1(dag_run_id, task_id): the output of a task in one dag run, as downstream tasks
-- see it (`upstream.output` in op_kwargs, `.expand(x=upstream.output)`: named query task_inputs,
-- schedule_tis_v3):
--   * a task that is not mapped (its TI has map_index -1): the result of that TI (task_result)
--     when the TI is in state success and left one; else NULL;
--   * a mapped task: a JSON array of the results of its TIs in state success that left one,
--     in map_index order ([] when none did);
--   * no TI of that task in the run: NULL.
-- A task leaves a result when its try succeeds with a value (a PythonTask returned something
-- other than None, or a final trigger event carried a payload): finish_ti_v3.
-- Lock: none (reads). Callers may assume: NULL means "no result", never an error; JSON null
-- is a result.
-- MySQL: a FUNCTION returning the JSON as LONGTEXT. The array is built by a loop, not by
-- JSON_ARRAYAGG or GROUP_CONCAT: MySQL 8's JSON_ARRAYAGG has no ORDER BY, and both are cut at
-- group_concat_max_len.
CREATE FUNCTION task_output_v1(p_dag_run_id BIGINT, p_task_id VARCHAR(250))
RETURNS LONGTEXT
NOT DETERMINISTIC READS SQL DATA
BEGIN
    DECLARE v_tis    INT;
    DECLARE v_mapped INT;
    DECLARE v_out    LONGTEXT DEFAULT NULL;
    DECLARE v_value  LONGTEXT;
    DECLARE v_done   BOOLEAN DEFAULT FALSE;
    DECLARE c_values CURSOR FOR
        SELECT r.value FROM task_instance ti
        JOIN task_result r ON r.ti_id = ti.id
        WHERE ti.dag_run_id = p_dag_run_id AND ti.task_id = p_task_id AND ti.state = 'success'
        ORDER BY ti.map_index;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;

    SELECT COUNT(*), MAX(CASE WHEN ti.map_index >= 0 THEN 1 ELSE 0 END) INTO v_tis, v_mapped
    FROM task_instance ti WHERE ti.dag_run_id = p_dag_run_id AND ti.task_id = p_task_id;
    IF v_tis = 0 THEN
        RETURN NULL;
    END IF;
    OPEN c_values;
    reading: LOOP
        FETCH c_values INTO v_value;
        IF v_done THEN
            LEAVE reading;
        END IF;
        IF v_mapped = 0 THEN
            SET v_out = v_value;
            LEAVE reading;
        END IF;
        SET v_out = CONCAT(COALESCE(CONCAT(v_out, ','), ''), v_value);
    END LOOP;
    CLOSE c_values;
    IF v_mapped = 1 THEN
        RETURN CONCAT('[', COALESCE(v_out, ''), ']');
    END IF;
    RETURN v_out;
END
