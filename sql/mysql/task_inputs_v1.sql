-- task_inputs_v1(ti_id): the upstream results a TI's try takes as inputs, for the worker that
-- starts it (named query task_inputs). task.inputs (written by `engine dags sync`) lists each
-- keyword argument that refers to an upstream's output: {"name", "upstream", "mapped"}
--   mapped 0: `op_kwargs={"rows": extract.output}`: value = the upstream's whole output;
--   mapped 1: `.expand(x=extract.output)`: value = element map_index of that output (a list).
-- One row per input: (name, upstream, mapped, found, value). found is false when there is no
-- such value (the upstream did not succeed or returned None, or the list is shorter): the
-- worker fails the try with a reason naming the input and the upstream. Outputs are read with
-- task_output_v1 (a mapped upstream's output is the list of its TIs' results).
-- Lock: none (reads). Callers may assume: no stored value makes it raise; a TI without
-- inputs gives no rows.
-- MySQL: a PROCEDURE whose SELECT returns the rows (a worker role may only EXECUTE). The
-- element is read only from an array: JSON_EXTRACT would treat a scalar as a one-item array.
CREATE PROCEDURE task_inputs_v1(IN p_ti_id BIGINT)
BEGIN
    SELECT x.name, x.upstream, x.mapped, x.value IS NOT NULL AS found, x.value
    FROM (
        SELECT y.name, y.upstream, y.mapped,
               CASE WHEN NOT y.mapped THEN y.v
                    WHEN y.map_index >= 0 AND JSON_TYPE(y.v) = 'ARRAY'
                    THEN JSON_EXTRACT(y.v, CONCAT('$[', y.map_index, ']')) END AS value
        FROM (
            SELECT i.name, i.upstream, COALESCE(i.mapped, 0) = 1 AS mapped, ti.map_index,
                   task_output_v1(ti.dag_run_id, i.upstream) AS v
            FROM task_instance ti
            JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
            JOIN JSON_TABLE(CASE WHEN JSON_TYPE(t.inputs) = 'ARRAY' THEN t.inputs ELSE '[]' END, '$[*]' COLUMNS (
                     name VARCHAR(250) PATH '$.name', upstream VARCHAR(250) PATH '$.upstream',
                     mapped INT PATH '$.mapped')) i
            WHERE ti.id = p_ti_id
        ) y
    ) x;
END
