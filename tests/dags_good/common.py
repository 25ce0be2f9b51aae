"""Helper module next to the DAG files (defines no DAG; the loader imports it and skips it)."""
DEFAULT_ARGS = {"pool": "default_pool", "retries": 2, "retry_delay": 60}
TABLES = ["orders", "customers"]
