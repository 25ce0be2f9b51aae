-- dag_errors: DAGs for which a step failed inside the database (the pass went on for every
-- other DAG): which step, its one-line message and when. The step clears its error when it
-- next succeeds for the DAG; `engine dags sync` clears it when the DAG is synced again.
CREATE VIEW dag_errors AS
SELECT d.dag_id, d.error_step, d.error, d.error_at, d.is_active, d.fileloc
FROM dag d
WHERE d.error IS NOT NULL;
