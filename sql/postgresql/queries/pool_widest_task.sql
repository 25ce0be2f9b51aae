-- The active task of pool :name that needs the most slots, when it needs more than :slots
-- (`engine pools set` refuses to shrink a pool below a task it must run; sync refuses the reverse).
SELECT dag_id, task_id, pool_slots FROM task
WHERE pool = :name AND is_active AND pool_slots > :slots
ORDER BY pool_slots DESC, dag_id, task_id
LIMIT 1
