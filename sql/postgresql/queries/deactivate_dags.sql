-- DAGs whose file under the synced path no longer defines them become inactive (history kept).
-- A fileloc relative to the DAGs folder is matched by rel_path / rel_prefix (NULL when the sync
-- has no DAGs folder; rel_prefix '%' when the whole folder was synced), an absolute one (stored
-- before revision 0009, or without a DAGs folder) by path / prefix.
UPDATE dag SET is_active = false
WHERE is_active
  AND (fileloc = :path OR fileloc LIKE :prefix
       OR (fileloc NOT LIKE '/%' AND (fileloc = :rel_path OR fileloc LIKE :rel_prefix)))
  AND NOT (dag_id = ANY (CAST(:dag_ids AS text[])))
RETURNING dag_id
