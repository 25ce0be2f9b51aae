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
CREATE OR REPLACE FUNCTION task_output_v1(p_dag_run_id bigint, p_task_id text)
RETURNS jsonb
LANGUAGE sql
STABLE
AS $$
    SELECT CASE WHEN bool_or(ti.map_index >= 0)
                THEN coalesce(jsonb_agg(r.value ORDER BY ti.map_index)
                                  FILTER (WHERE r.value IS NOT NULL AND ti.state = 'success'), '[]'::jsonb)
                ELSE (array_agg(r.value) FILTER (WHERE r.value IS NOT NULL AND ti.state = 'success'))[1] END
    FROM task_instance ti
    LEFT JOIN task_result r ON r.ti_id = ti.id
    WHERE ti.dag_run_id = p_dag_run_id AND ti.task_id = p_task_id
$$;
