"""Benchmark: `engine db clean` on a million old rows beside a running scheduler.

    python loadtests/bench_clean.py [--database-url URL] [--runs 100000] [--batch 1000] [--baseline 10]

Fills a fresh database with old rows (default: 100,000 finished dag runs of 3 TIs each, 300,000
history rows and 300,000 tick_log rows: 1,000,000 rows, all 400 days old), then runs a
scheduler in a thread (run_once() in a loop, with a live DAG triggered every few passes and its
TIs claimed and finished, so every step does real work) and measures
  * the scheduler's pass durations with no cleaner running (baseline),
  * the same while `retention.clean()` (clean_v1 in batches, as `engine db clean`) deletes
    everything old, and the cleaner's own calls (median, p99, max per batch);
  * the longest lock wait the cleaner caused: a sampler thread polls every 5 ms for a session
    waiting on a lock held by the cleaner's session (PostgreSQL: pg_blocking_pids;
    MySQL/MariaDB: information_schema.innodb_lock_waits) and keeps the longest run of
    consecutive samples (a wait shorter than 5 ms may be missed: that is the resolution).
Prints medians, p99 and max with the machine's load average beside them. Default database: a
new database engine_bench_clean on the PostgreSQL at 127.0.0.1:5432 (user postgres); for
MySQL/MariaDB pass --database-url mysql+pymysql://root@127.0.0.1:3306/engine_bench_clean.
The database is dropped and created again.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine import db, migrate, retention  # noqa: E402
from engine.config import load_config  # noqa: E402
from engine.dagbag import load_dags  # noqa: E402
from engine.dagsync import sync  # noqa: E402
from engine.scheduler import Scheduler  # noqa: E402

DAGS = """
from engine import DAG, BashTask
with DAG("old"):
    BashTask("t1", bash_command="true") >> BashTask("t2", bash_command="true") >> BashTask("t3", bash_command="true")
with DAG("live", max_active_runs=16):
    BashTask("a", bash_command="true") >> [BashTask("b", bash_command="true"), BashTask("c", bash_command="true")]
"""

FILL_PG = """
INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, created_at, start_date, end_date)
SELECT 'old', 'old_' || g, 'manual', 'success', t, t, t, t
FROM generate_series(1, {runs}) g, LATERAL (SELECT now() - interval '400 days' + g * interval '1 second' AS t) x;
INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, try_number, max_tries,
                           priority_weight, pool, pool_slots, queue, executor, run_after, start_date, end_date)
SELECT r.id, r.dag_id, r.run_id, 't' || k, -1, 'success', 1, 0, 1, 'default_pool', 1, 'default', 'default',
       r.run_after, r.start_date, r.end_date
FROM dag_run r, generate_series(1, 3) k WHERE r.dag_id = 'old';
INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool, pool_slots,
                                   start_date, end_date)
SELECT ti.id, ti.dag_id, ti.run_id, ti.task_id, -1, 1, 'success', ti.pool, 1, ti.start_date, ti.end_date
FROM task_instance ti WHERE ti.dag_id = 'old';
INSERT INTO tick_log (hostname, started_at, duration_ms, runs_created, runs_started, tis_scheduled, tis_queued,
                      runs_finished)
SELECT 'old', now() - interval '400 days' + g * interval '1 second', 1, 0, 0, 0, 0, 0
FROM generate_series(1, {ticks}) g;
ANALYZE
"""

FILL_MYSQL = """
CREATE TEMPORARY TABLE seq (n INT PRIMARY KEY);
INSERT INTO seq (n)
SELECT 1 + a.d + 10 * b.d + 100 * c.d + 1000 * d.d + 10000 * e.d + 100000 * f.d
FROM (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
      UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) a,
     (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
      UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) b,
     (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
      UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) c,
     (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
      UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) d,
     (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
      UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) e,
     (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
      UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) f;
INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, created_at, start_date, end_date)
SELECT 'old', CONCAT('old_', n), 'manual', 'success', t, t, t, t
FROM (SELECT n, UTC_TIMESTAMP(6) - INTERVAL 400 DAY + INTERVAL n SECOND AS t FROM seq WHERE n <= {runs}) x;
INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, try_number, max_tries,
                           priority_weight, pool, pool_slots, queue, executor, run_after, start_date, end_date)
SELECT r.id, r.dag_id, r.run_id, CONCAT('t', k.n), -1, 'success', 1, 0, 1, 'default_pool', 1, 'default', 'default',
       r.run_after, r.start_date, r.end_date
FROM dag_run r JOIN seq k ON k.n <= 3 WHERE r.dag_id = 'old';
INSERT INTO task_instance_history (ti_id, dag_id, run_id, task_id, map_index, try_number, state, pool, pool_slots,
                                   start_date, end_date)
SELECT ti.id, ti.dag_id, ti.run_id, ti.task_id, -1, 1, 'success', ti.pool, 1, ti.start_date, ti.end_date
FROM task_instance ti WHERE ti.dag_id = 'old';
INSERT INTO tick_log (hostname, started_at, duration_ms, runs_created, runs_started, tis_scheduled, tis_queued,
                      runs_finished)
SELECT 'old', UTC_TIMESTAMP(6) - INTERVAL 400 DAY + INTERVAL n SECOND, 1, 0, 0, 0, 0, 0 FROM seq WHERE n <= {ticks};
ANALYZE TABLE dag_run, task_instance, task_instance_history, tick_log
"""

# Sessions waiting on a lock that the cleaner's session (:pid) holds.
BLOCKED_PG = "SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY (pg_blocking_pids(pid))"
BLOCKED_MYSQL = ("SELECT count(*) FROM information_schema.innodb_lock_waits w "
                 "JOIN information_schema.innodb_trx t ON t.trx_id = w.blocking_trx_id "
                 "WHERE t.trx_mysql_thread_id = :pid")


def fresh_database(url: str) -> sa.Engine:
    u = sa.engine.make_url(url)
    if db.is_mysql_url(url):
        admin = db.make_engine(u._replace(database=None).render_as_string(hide_password=False))
        with admin.begin() as c:
            c.exec_driver_sql(f"DROP DATABASE IF EXISTS `{u.database}`")
    else:
        admin = sa.create_engine(u.set(database="postgres").render_as_string(hide_password=False),
                                 isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{u.database}" WITH (FORCE)')
            c.exec_driver_sql(f'CREATE DATABASE "{u.database}"')
    admin.dispose()
    eng = db.make_engine(url)
    db.ensure_database(eng)
    migrate.upgrade(eng)
    return eng


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def summary(name: str, values: list[float]) -> str:
    return (f"{name:<34} n={len(values):<6} median={statistics.median(values) if values else float('nan'):8.1f} ms  "
            f"p99={pct(values, 99):8.1f} ms  max={max(values) if values else float('nan'):8.1f} ms")


class SchedulerThread(threading.Thread):
    """run_once() in a loop, with live work: a run of `live` triggered every 3 passes, its TIs
    claimed and finished like a worker would. Records every pass's duration (ms)."""

    def __init__(self, url: str, cfg):
        super().__init__(daemon=True)
        self.eng = db.make_engine(url)
        self.sched = Scheduler(self.eng, cfg)
        self.durations: list[tuple[float, float]] = []  # (monotonic end, ms)
        self.stop = threading.Event()
        self.errors: list[str] = []

    def run(self):
        n = 0
        while not self.stop.is_set():
            n += 1
            t0 = time.monotonic()
            try:
                with db.connect(self.eng) as conn:
                    if n % 3 == 0:
                        db.run(conn, "trigger_dag", dag_id="live", run_id=f"live_{n}", conf="{}", now=None)
                self.sched.run_once()
                with db.connect(self.eng) as conn:
                    claimed = db.run(conn, "claim_tis", job_id=None, hostname="bench", queues=["default"], limit=100,
                                     log_dir="/tmp/engine-bench-logs", now=None).all()
                for ti in claimed:
                    with db.connect(self.eng) as conn:
                        db.run(conn, "finish_ti", ti_id=ti.ti_id, try_number=ti.try_number, exit_code=0,
                               timed_out=False, reason=None, now=None)
            except Exception as exc:  # noqa: BLE001 - report, keep going
                self.errors.append(db.first_line(exc))
            end = time.monotonic()
            self.durations.append((end, (end - t0) * 1000))
        self.sched.stop()
        self.eng.dispose()


class Sampler(threading.Thread):
    """Polls every 5 ms for sessions blocked by the cleaner; keeps the longest blocked stretch."""

    def __init__(self, url: str, pid: int):
        super().__init__(daemon=True)
        self.eng = db.make_engine(url)
        self.pid = pid
        self.stop = threading.Event()
        self.longest_ms = 0.0
        self.samples = 0
        self.blocked_samples = 0

    def run(self):
        query = sa.text(BLOCKED_MYSQL if db.is_mysql_url(str(self.eng.url)) else BLOCKED_PG)
        since = None
        with self.eng.connect() as c:
            while not self.stop.is_set():
                n = c.execute(query, {"pid": self.pid}).scalar()
                c.rollback()
                now = time.monotonic()
                self.samples += 1
                if n:
                    self.blocked_samples += 1
                    since = since or now
                    self.longest_ms = max(self.longest_ms, (now - since) * 1000)
                else:
                    since = None
                time.sleep(0.005)
        self.eng.dispose()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/engine_bench_clean")
    ap.add_argument("--runs", type=int, default=100_000, help="old dag runs (3 TIs and 3 history rows each)")
    ap.add_argument("--ticks", type=int, default=None, help="old tick_log rows (default: 3 x runs)")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--baseline", type=float, default=10.0, help="seconds of scheduler passes without a cleaner")
    args = ap.parse_args()
    ticks = args.ticks if args.ticks is not None else 3 * args.runs
    url = db.resolve_url(load_config({"database_url": args.database_url}))
    eng = fresh_database(url)
    folder = Path(tempfile.mkdtemp(prefix="engine-bench-clean-"))
    (folder / "dags.py").write_text(DAGS)
    sync(eng, folder, load_dags(folder))
    t0 = time.monotonic()
    script = (FILL_MYSQL if db.is_mysql_url(url) else FILL_PG).format(runs=args.runs, ticks=ticks)
    with eng.begin() as c:
        for stmt in script.split(";\n"):
            if stmt.strip():
                c.exec_driver_sql(stmt)
    with eng.connect() as c:
        old = {t: c.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar()
               for t in ("dag_run", "task_instance", "task_instance_history", "tick_log")}
    total = sum(old.values())
    print(f"filled {total:,} old rows in {time.monotonic() - t0:.1f} s: {old}")

    home = tempfile.mkdtemp(prefix="engine-bench-clean-home-")
    cfg = load_config({"database_url": url, "home": home, "clean_interval": 0})  # the scheduler does not clean here
    sched = SchedulerThread(url, cfg)
    sched.start()
    time.sleep(args.baseline)
    clean_start = time.monotonic()

    calls: list[float] = []
    cleaner = db.make_engine(url)
    with cleaner.connect() as probe:
        pid = probe.exec_driver_sql("SELECT CONNECTION_ID()" if db.is_mysql_url(url) else "SELECT pg_backend_pid()").scalar()
        probe.rollback()
        # The cleaner runs on this one connection, so the sampler knows whom to watch.
        sampler = Sampler(url, pid)
        sampler.start()
        deleted = {t: 0 for t in retention.TABLES}
        while True:
            t = time.monotonic()
            with probe.begin():
                rows = db.run(probe, "clean", table_name=None, older_than=30 * 86400.0, batch=args.batch,
                              dry_run=False, interval=None, now=None).all()
            calls.append((time.monotonic() - t) * 1000)
            for r in rows:
                deleted[r.table_name] += int(r.deleted)
            if not any(r.more for r in rows):
                break
    clean_end = time.monotonic()
    time.sleep(1.0)
    sampler.stop.set()
    sched.stop.set()
    sampler.join()
    sched.join()
    cleaner.dispose()

    base = [ms for end, ms in sched.durations if end < clean_start]
    during = [ms for end, ms in sched.durations if clean_start <= end <= clean_end]
    load = os.getloadavg()
    dialect = "mysql" if db.is_mysql_url(url) else "postgresql"
    print(f"dialect {dialect}; batch {args.batch}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"on {os.cpu_count()} cores")
    print(f"deleted {sum(deleted.values()):,} rows directly ({deleted}) + {old['task_instance']:,} TIs by cascade "
          f"in {clean_end - clean_start:.1f} s, {len(calls)} calls of clean_v1")
    print(summary("clean_v1 call", calls))
    print(summary("scheduler pass, no cleaner", base))
    print(summary("scheduler pass, cleaner running", during))
    if base and during:
        print(f"ratio during/baseline: median {statistics.median(during) / statistics.median(base):.2f}, "
              f"p99 {pct(during, 99) / pct(base, 99):.2f}")
    print(f"longest lock wait caused by the cleaner: {sampler.longest_ms:.1f} ms "
          f"({sampler.blocked_samples} of {sampler.samples} samples at 5 ms saw a session blocked by it)")
    if sched.errors:
        print(f"scheduler errors: {len(sched.errors)}, first: {sched.errors[0]}")
    with eng.connect() as c:
        left = c.exec_driver_sql("SELECT count(*) FROM dag_run WHERE dag_id = 'old'").scalar()
    print(f"old runs left: {left} (the newest run of a DAG is kept)")
    eng.dispose()
    return 0


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    sys.exit(handle_errors(main)())
