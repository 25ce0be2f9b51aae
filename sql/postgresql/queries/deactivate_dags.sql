-- DAGs whose file under the synced path no longer defines them become inactive (history kept).
UPDATE dag SET is_active = false
WHERE is_active AND (fileloc = :path OR fileloc LIKE :prefix)
  AND NOT (dag_id = ANY (CAST(:dag_ids AS text[])))
RETURNING dag_id
