-- task_results: the stored result of every TI that has one (a PythonTask's return value, or the
-- payload of a final trigger event), with the TI it belongs to. `value` is JSON; `bytes` its
-- size as stored. Written by finish_ti_v3 on success (in the same transaction as the state),
-- removed when a later try of the TI does not succeed; deleted with its TI (engine db clean).
CREATE VIEW task_results AS
SELECT ti.dag_id, ti.run_id, ti.task_id, ti.map_index, r.try_number, ti.state, r.value,
       LENGTH(r.value) AS bytes, r.created_at, ti.id AS ti_id
FROM task_result r
JOIN task_instance ti ON ti.id = r.ti_id;
