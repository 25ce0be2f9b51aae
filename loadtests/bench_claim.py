"""What one worker's claim costs, idle and busy, per claim_tis version.

    python loadtests/bench_claim.py [--dialect postgresql|mysql] [--database-url URL]
                                    [--runs 1000] [--tasks 100] [--calls 500] [--rounds 2]
                                    [--versions 3,4] [--celery N]

A fresh database (`bench_claim` on the local server of the dialect unless --database-url names
one: that database is DROPPED and re-created) gets one DAG of --tasks tasks and --runs started
runs; then half of their TIs are `queued`, spread over the queues q0, q1 and q2, the rest
`success`, and the statistics are refreshed. Each round calls every version of --versions in turn
(pinned as the setting procedure_versions does), --calls times each in one session, each call
its own transaction, rolled back:
  idle       a worker of the queue `idle`, where nothing is queued (what every poll of an idle
             worker costs);
  claim 1    a worker of q0 taking 1 TI;
  claim 64   a worker of q0 taking 64 TIs.
With --celery N, N of q0's queued TIs belong to the executor 'celery' and come first in claim
order (priority 100): a Celery backlog that a worker of the database queue must not pay for; and
another N Celery TIs are queued in the queue `qc`, where nothing else is, for one more case:
  celery only  a worker of qc (what an idle worker's poll costs when its queue holds only another
             executor's TIs).
Prints p50 and p99 per call (round trip included) and the load average. Nothing is started.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine import calls, db, migrate  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_latency import fresh_database, load, pct  # noqa: E402
from bench_lifecycle import setup  # noqa: E402

DEFAULT_URLS = {"postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/bench_claim",
                "mysql": "mysql+pymysql://root@127.0.0.1:3306/bench_claim"}
CASES = (("idle", ["idle"], 4), ("claim 1", ["q0"], 1), ("claim 64", ["q0"], 64))
CELERY_CASE = ("celery only", ["qc"], 4)


def world(eng, runs: int, tasks: int, celery: int) -> int:
    """`runs` started runs of the bench DAG; half their TIs queued over q0-q2, `celery` of q0's
    and `celery` more in qc given to the executor 'celery'. Returns the TIs."""
    setup(eng, tasks)  # the DAG bench_life of bench_lifecycle.py: limits opened wide
    with db.connect(eng) as c:
        for n in range(runs):
            db.run(c, "trigger_dag", dag_id="bench_life", run_id=f"r{n:05d}", conf="{}", now=None)
    while True:  # each call starts the triggered runs it may (their TIs made), until none is left
        with db.connect(eng) as c:
            made = db.run(c, "create_dag_runs", now=None).one()
        if not made.runs_created and not made.runs_started:
            break
    with eng.begin() as c:
        c.execute(sa.text(
            "UPDATE task_instance SET state = CASE WHEN id % 2 = 0 THEN 'queued' ELSE 'success' END, "
            "queue = CASE id % 3 WHEN 0 THEN 'q0' WHEN 1 THEN 'q1' ELSE 'q2' END, queued_at = now()"))
        for queue, to in (("q0", "q0"), ("q1", "qc")):  # MariaDB: no LIMIT inside IN (subquery)
            c.execute(sa.text(
                "UPDATE task_instance SET executor = 'celery', priority_weight = 100, queue = :to "
                "WHERE state = 'queued' AND queue = :queue AND executor = 'default' ORDER BY id LIMIT :n"
                if db.is_mysql_url(str(eng.url)) else
                "UPDATE task_instance SET executor = 'celery', priority_weight = 100, queue = :to "
                "WHERE id IN (SELECT id FROM task_instance WHERE state = 'queued' AND queue = :queue "
                "AND executor = 'default' ORDER BY id LIMIT :n)"), {"queue": queue, "to": to, "n": celery})
        c.execute(sa.text("ANALYZE TABLE task_instance" if db.is_mysql_url(str(eng.url)) else "ANALYZE task_instance"))
        return c.execute(sa.text("SELECT count(*) FROM task_instance")).scalar_one()


def measure(eng, queues: list[str], limit: int, n: int) -> tuple[list[float], int]:
    took, got = [], 0
    with eng.connect() as conn:
        for _ in range(n):
            t = time.perf_counter()
            tx = conn.begin()
            got = len(db.run(conn, "claim_tis", job_id=None, hostname="bench", queues=queues, limit=limit,
                             log_dir="/tmp/bench-claim", now=None).all())
            tx.rollback()
            took.append(time.perf_counter() - t)
    return took, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dialect", choices=sorted(DEFAULT_URLS), default="postgresql")
    ap.add_argument("--database-url")
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--versions", default="3,4", help="comma-separated claim_tis versions, called in turn")
    ap.add_argument("--celery", type=int, default=0, help="Celery TIs queued ahead in q0, and alone in qc")
    args = ap.parse_args()
    url = args.database_url or DEFAULT_URLS[args.dialect]
    fresh_database(url)
    eng = db.make_engine(url)
    migrate.upgrade(eng)
    t = time.perf_counter()
    total = world(eng, args.runs, args.tasks, args.celery)
    cases = CASES + ((CELERY_CASE,) if args.celery else ())
    celery = f", {args.celery:,} Celery TIs first in q0 and {args.celery:,} alone in qc" if args.celery else ""
    print(f"bench_claim on {eng.dialect.name}: {total:,} TIs, {total // 2:,} queued over q0-q2{celery} "
          f"(world made in {time.perf_counter() - t:.1f} s); {load()}", flush=True)
    for r in range(args.rounds):
        for v in [int(x) for x in args.versions.split(",")]:
            pinned = calls.pin(eng, f"claim_tis={v}")
            parts = []
            for name, queues, limit in cases:
                took, got = measure(pinned, queues, limit, args.calls)
                ms = [x * 1000 for x in took]
                parts.append(f"{name} ({got}) p50 {pct(ms, 50):.3f} p99 {pct(ms, 99):.3f} ms")
            print(f"round {r + 1} claim_tis_v{v}: " + "; ".join(parts) + f"; {load()}", flush=True)
    eng.dispose()


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    sys.exit(handle_errors(main)())
