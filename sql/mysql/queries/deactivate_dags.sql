-- DAGs whose file under the synced path no longer defines them become inactive (history kept).
-- A fileloc relative to the DAGs folder is matched by rel_path / rel_prefix (NULL when the sync
-- has no DAGs folder; rel_prefix '%' when the whole folder was synced), an absolute one (stored
-- before revision 0009, or without a DAGs folder) by path / prefix.
-- MySQL: no UPDATE ... RETURNING; the ids go through a session variable (a JSON array), set by
-- SELECT ... INTO (SET @v = (SELECT ...) would read with shared locks in MariaDB).
SELECT COALESCE(JSON_ARRAYAGG(d.dag_id), JSON_ARRAY()) INTO @engine_deactivated FROM dag d
WHERE d.is_active
  AND (d.fileloc = :path OR d.fileloc LIKE :prefix
       OR (d.fileloc NOT LIKE '/%' AND (d.fileloc = :rel_path OR d.fileloc LIKE :rel_prefix)))
  AND NOT JSON_CONTAINS(:dag_ids, JSON_QUOTE(d.dag_id));
UPDATE dag SET is_active = false WHERE is_active AND JSON_CONTAINS(@engine_deactivated, JSON_QUOTE(dag_id));
SELECT g.dag_id FROM JSON_TABLE(@engine_deactivated, '$[*]' COLUMNS (
    dag_id VARCHAR(250) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) g
