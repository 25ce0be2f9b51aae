-- The upstream results a TI takes as inputs (task_inputs_v1), read by the worker that starts it.
-- result json: value
-- result bool: mapped found
SELECT * FROM task_inputs_v1(:ti_id)
