"""End-to-end latency and worker throughput, as a user sees them: real `engine scheduler` and
`engine worker` processes, real tries, timestamps from the database.

    python loadtests/bench_latency.py [--dialect postgresql|mysql] [--database-url URL]
                                      [--chains 3] [--mapped 1000] [--concurrency 16]

It creates a fresh database (`bench_latency` on the local server of the dialect unless
--database-url names one: that database is DROPPED and re-created), syncs three DAGs from a
temporary folder, starts one `engine scheduler` and one `engine worker --concurrency N` as
subprocesses with default settings, and measures:

  * hop latency: a chain of 20 no-op BashTasks (`true`), run --chains times one after the
    other; for every edge, upstream end_date (the worker's report, finish_ti) -> downstream
    start_date (its claim, claim_tis): p50, p99, max; and the chain's wall time;
  * no-op try: claim (start_date) -> reported success (end_date) of every chain TI: p50, p99;
  * throughput: --mapped no-op BashTasks (`true`), then as many no-op PythonTasks, mapped in
    one run each: TIs / (last end_date - first start_date).

The figures come from the database's clock (start_date/end_date of task_instance), so they
include everything between the two: wake-up or poll delays, the scheduler's pass, the claim,
starting the try, reaping it, the report. The machine's load average is printed beside them:
on a shared machine compare runs made at similar loads.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from engine import db  # noqa: E402

DEFAULT_URLS = {"postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/bench_latency",
                "mysql": "mysql+pymysql://root@127.0.0.1:3306/bench_latency"}
CHAIN = 20

DAGS = {
    "bench_chain.py": """
        from engine import DAG, BashTask
        with DAG("bench_chain", schedule=None, max_active_runs=1):
            prev = None
            for i in range({chain}):
                t = BashTask(f"t{{i:02d}}", bash_command="true")
                if prev is not None:
                    prev >> t
                prev = t
        """,
    "bench_bash.py": """
        from engine import DAG, BashTask
        with DAG("bench_bash", schedule=None, max_active_tasks=100000):
            BashTask("noop", bash_command="true", max_active_tis_per_dagrun=100000).expand(
                bash_command=["true"] * {mapped})
        """,
    "bench_python.py": """
        from engine import DAG, PythonTask
        with DAG("bench_python", schedule=None, max_active_tasks=100000):
            PythonTask("noop", python_callable="bench_noop:noop", max_active_tis_per_dagrun=100000).expand(
                n=list(range({mapped})))
        """,
    "bench_noop.py": """
        def noop(n=None):
            return None
        """,
}


def fresh_database(url: str) -> None:
    u = sa.engine.make_url(url)
    name = u.database
    if db.is_mysql_url(url):
        server = db.make_engine(u._replace(database=None).render_as_string(hide_password=False))
        with server.connect() as c:
            c.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
            c.exec_driver_sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    else:
        server = db.make_engine(u._replace(database="postgres").render_as_string(hide_password=False))
        with server.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            c.exec_driver_sql(f'CREATE DATABASE "{name}"')
    server.dispose()


def bench_engine(url: str | None, prefix: str = "engine-bench-"):
    """The engine of a benchmark run, its schema at head: `url` (created when missing, MySQL),
    or without one a throw-away embedded PostgreSQL in a new folder under /tmp."""
    from engine import migrate
    url = url or db.embedded_url(Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp")), announce=False)
    eng = db.make_engine(url)
    db.ensure_database(eng)
    migrate.upgrade(eng)
    return eng


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"


class Deployment:
    def __init__(self, url: str, home: Path, concurrency: int, engine_bin: str):
        self.url, self.home, self.concurrency, self.bin = url, home, concurrency, engine_bin
        self.env = {**os.environ, "ENGINE_DATABASE_URL": url, "ENGINE_HOME": str(home),
                    "ENGINE_DAGS_ARE_PAUSED_AT_CREATION": "false",  # the bench's DAGs run when triggered
                    "ENGINE_DAGS_FOLDER": str(home / "dags")}
        self.procs: list[subprocess.Popen] = []

    def cli(self, *args: str) -> str:
        return subprocess.run([self.bin, *args], env=self.env, check=True, capture_output=True, text=True).stdout

    def start(self) -> None:
        for args in (["scheduler"], ["worker", "--concurrency", str(self.concurrency)]):
            out = open(self.home / f"{args[0]}.log", "ab")
            self.procs.append(subprocess.Popen([self.bin, "-v", *args], env=self.env, stdout=out,
                                               stderr=subprocess.STDOUT))

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def wait_run(eng, dag_id: str, run_id: str, timeout: float) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with eng.connect() as c:
            state = c.execute(sa.text("SELECT state FROM dag_run WHERE dag_id = :d AND run_id = :r"),
                              {"d": dag_id, "r": run_id}).scalar()
        if state in ("success", "failed"):
            return state
        time.sleep(0.2)
    raise SystemExit(f"run {dag_id}/{run_id} did not end within {timeout:.0f} s (see the logs in the home folder)")


def tis(eng, dag_id: str, run_id: str) -> list:
    with eng.connect() as c:
        return c.execute(sa.text(
            "SELECT task_id, map_index, state, start_date, end_date FROM task_instance "
            "WHERE dag_id = :d AND run_id = :r ORDER BY task_id, map_index"), {"d": dag_id, "r": run_id}).all()


def ms(delta) -> float:
    return delta.total_seconds() * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dialect", choices=sorted(DEFAULT_URLS), default="postgresql")
    ap.add_argument("--database-url", help="database to DROP and re-create (default: bench_latency on the local server)")
    ap.add_argument("--chains", type=int, default=3, help="chain runs (0: throughput only)")
    ap.add_argument("--mapped", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (logs)")
    args = ap.parse_args()
    url = args.database_url or DEFAULT_URLS[args.dialect]
    engine_bin = shutil.which("engine", path=str(Path(sys.executable).parent)) or "engine"

    fresh_database(url)
    tmp = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    dags = tmp / "dags"
    dags.mkdir()
    for name, text in DAGS.items():
        (dags / name).write_text(textwrap.dedent(text.format(chain=CHAIN, mapped=args.mapped)))
    dep = Deployment(url, tmp, args.concurrency, engine_bin)
    dep.cli("db", "upgrade")
    dep.cli("dags", "sync", str(dags))
    eng = db.make_engine(url)
    print(f"bench_latency on {eng.dialect.name} ({sa.engine.make_url(url).render_as_string(hide_password=True)}), "
          f"one scheduler + one worker --concurrency {args.concurrency}; {load()}")
    dep.start()
    try:
        hops, tries, walls = [], [], []
        for i in range(args.chains):
            run_id = f"chain{i}"
            t0 = time.monotonic()
            dep.cli("dags", "trigger", "bench_chain", "--run-id", run_id)
            state = wait_run(eng, "bench_chain", run_id, 600)
            walls.append(time.monotonic() - t0)
            rows = tis(eng, "bench_chain", run_id)
            if state != "success" or any(r.state != "success" for r in rows):
                raise SystemExit(f"chain run {run_id} ended {state}: {[(r.task_id, r.state) for r in rows]}")
            for up, down in zip(rows, rows[1:]):
                hops.append(ms(down.start_date - up.end_date))
            tries.extend(ms(r.end_date - r.start_date) for r in rows)
        if args.chains:
            print(f"chain of {CHAIN} no-op BashTasks x {args.chains}: wall {statistics.median(walls):.2f} s (median); "
              f"{load()}")
            print(f"  hop upstream end -> downstream start: p50 {pct(hops, 50):.0f} ms  p99 {pct(hops, 99):.0f} ms  "
                  f"max {max(hops):.0f} ms  (n={len(hops)})")
            print(f"  no-op try claim -> reported success:  p50 {pct(tries, 50):.0f} ms  p99 {pct(tries, 99):.0f} ms  "
                  f"(n={len(tries)})")
        for dag_id, kind in (("bench_bash", "BashTask"), ("bench_python", "PythonTask")):
            dep.cli("dags", "trigger", dag_id, "--run-id", "mapped")
            state = wait_run(eng, dag_id, "mapped", 1800)
            rows = tis(eng, dag_id, "mapped")
            bad = [r for r in rows if r.state != "success"]
            if state != "success" or bad or len(rows) != args.mapped:
                raise SystemExit(f"{dag_id}: run {state}, {len(rows)} TIs, {len(bad)} not successful")
            span = (max(r.end_date for r in rows) - min(r.start_date for r in rows)).total_seconds()
            try_ms = [ms(r.end_date - r.start_date) for r in rows]
            print(f"{args.mapped} mapped no-op {kind}s at --concurrency {args.concurrency}: "
                  f"{args.mapped / span:.0f} tries/s ({span:.1f} s); try p50 {pct(try_ms, 50):.0f} ms "
                  f"p99 {pct(try_ms, 99):.0f} ms; {load()}")
    finally:
        dep.stop()
        eng.dispose()
        if args.keep:
            print(f"logs in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    handle_errors(main)()
