-- MySQL: ups and downs arrive as JSON arrays, zipped by position.
INSERT INTO task_dependency (dag_id, upstream_task_id, task_id)
SELECT :dag_id, u.up, d.down
FROM JSON_TABLE(:ups, '$[*]' COLUMNS (n FOR ORDINALITY, up VARCHAR(250) PATH '$')) u
JOIN JSON_TABLE(:downs, '$[*]' COLUMNS (n FOR ORDINALITY, down VARCHAR(250) PATH '$')) d ON d.n = u.n
