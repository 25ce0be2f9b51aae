-- DAGs of a sync that another file defines now (an active DAG whose fileloc differs):
-- `engine dags sync` refuses to move them unless --force. A fileloc stored as the file's
-- absolute path (before revision 0009) is the same file: abs_filelocs.
-- MySQL: the parallel lists arrive as JSON arrays (engine.db.run), zipped by position.
SELECT d.dag_id, d.fileloc AS stored_in, f.fileloc AS synced_from
FROM JSON_TABLE(:dag_ids, '$[*]' COLUMNS (n FOR ORDINALITY,
         dag_id VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) x
JOIN JSON_TABLE(:filelocs, '$[*]' COLUMNS (n FOR ORDINALITY,
         fileloc TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) f ON f.n = x.n
JOIN JSON_TABLE(:abs_filelocs, '$[*]' COLUMNS (n FOR ORDINALITY,
         abs_fileloc TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) a ON a.n = x.n
JOIN dag d ON d.dag_id = x.dag_id AND d.is_active AND d.fileloc <> f.fileloc AND d.fileloc <> a.abs_fileloc
ORDER BY d.dag_id
