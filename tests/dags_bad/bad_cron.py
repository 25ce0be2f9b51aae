from engine.dag import DAG

DAG("bad_cron", schedule="0 0 L * *", start_date="2026-01-01")
