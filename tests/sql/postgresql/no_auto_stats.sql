-- tests/test_analyze_stale.py: only analyze_stale_v1 refreshes these statistics during the test.
ALTER TABLE dag_run SET (autovacuum_enabled = false);
