-- DAGs of a sync that another file defines now (an active DAG whose fileloc differs):
-- `engine dags sync` refuses to move them unless --force.
SELECT d.dag_id, d.fileloc AS stored_in, x.fileloc AS synced_from
FROM unnest(CAST(:dag_ids AS text[]), CAST(:filelocs AS text[])) AS x (dag_id, fileloc)
JOIN dag d ON d.dag_id = x.dag_id AND d.is_active AND d.fileloc <> x.fileloc
ORDER BY d.dag_id
