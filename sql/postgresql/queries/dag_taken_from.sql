-- DAGs of a sync that another file defines now (an active DAG whose fileloc differs):
-- `engine dags sync` refuses to move them unless --force. A fileloc stored as the file's
-- absolute path (before revision 0009) is the same file: abs_filelocs.
SELECT d.dag_id, d.fileloc AS stored_in, x.fileloc AS synced_from
FROM unnest(CAST(:dag_ids AS text[]), CAST(:filelocs AS text[]), CAST(:abs_filelocs AS text[]))
     AS x (dag_id, fileloc, abs_fileloc)
JOIN dag d ON d.dag_id = x.dag_id AND d.is_active AND d.fileloc <> x.fileloc AND d.fileloc <> x.abs_fileloc
ORDER BY d.dag_id
