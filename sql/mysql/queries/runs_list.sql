-- `engine runs list`: the newest runs first, from the view run_overview. The runs are chosen
-- first (newest, filtered, LIMIT) and joined to the view by its key, so MariaDB counts the TIs of
-- those runs only (a LATERAL DERIVED plan); through the view alone it counted every run's TIs
-- before the LIMIT (5.2 s with 1,000,000 TIs, 0.1 s so).
SELECT o.dag_id, o.run_id, o.run_type, o.state, o.logical_date, o.start_date, o.end_date, o.duration_s, o.tis,
       o.success, o.failed, o.skipped, o.unfinished, o.reason
FROM (SELECT r.id, r.created_at FROM dag_run r
      WHERE (:dag_id IS NULL OR r.dag_id = :dag_id) AND (:state IS NULL OR r.state = :state)
      ORDER BY r.created_at DESC, r.id DESC
      LIMIT :limit) n
JOIN run_overview o ON o.dag_run_id = n.id
ORDER BY n.created_at DESC, n.id DESC
