-- What is still in flight in draining DAGs (view drain_status); no row: drained.
SELECT dag_id, queued, running, deferred, resuming FROM drain_status ORDER BY dag_id
