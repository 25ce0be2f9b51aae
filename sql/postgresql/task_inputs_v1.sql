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
CREATE OR REPLACE FUNCTION task_inputs_v1(p_ti_id bigint)
RETURNS TABLE (name text, upstream text, mapped boolean, found boolean, value jsonb)
LANGUAGE sql
STABLE
AS $$
    SELECT x.name, x.upstream, x.mapped, x.value IS NOT NULL, x.value
    FROM (
        SELECT i.name, i.upstream, coalesce(i.mapped, 0) = 1 AS mapped,
               CASE WHEN coalesce(i.mapped, 0) = 0 THEN o.v
                    WHEN ti.map_index >= 0 AND jsonb_typeof(o.v) = 'array' THEN o.v -> ti.map_index END AS value
        FROM task_instance ti
        JOIN task t ON t.dag_id = ti.dag_id AND t.task_id = ti.task_id
        CROSS JOIN LATERAL jsonb_to_recordset(CASE WHEN jsonb_typeof(t.inputs) = 'array' THEN t.inputs
                                                   ELSE '[]'::jsonb END) AS i(name text, upstream text, mapped int)
        CROSS JOIN LATERAL (SELECT task_output_v1(ti.dag_run_id, i.upstream) AS v) o
        WHERE ti.id = p_ti_id
    ) x
$$;
