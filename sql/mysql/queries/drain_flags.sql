-- What drains: ('deployment', NULL, since) when the whole deployment does, ('dag', dag_id, NULL) per DAG.
SELECT 'deployment' AS scope, NULL AS dag_id, drain_started_at AS since FROM deployment WHERE id = 1 AND is_draining
UNION ALL
SELECT 'dag', dag_id, NULL FROM dag WHERE is_draining
ORDER BY 1 DESC, 2
