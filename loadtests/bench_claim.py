"""What one worker's claim and one dispatcher's pass cost, idle and busy, per version.

    python loadtests/bench_claim.py [--dialect postgresql|mysql] [--database-url URL]
                                    [--runs 1000] [--tasks 100] [--calls 500] [--rounds 2]
                                    [--versions 3,4] [--celery N] [--dispatch-versions 1,2]

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
The Celery TIs of q0 have a message in flight (a ti_dispatch row sent when the world was made);
qc's have none. With --dispatch-versions, each round also calls those dispatch_tis versions,
alternated call by call, --calls times each, rolled back (resend_after 3,600 s). On PostgreSQL
ti_dispatch is vacuumed (untimed) before every call: each rolled-back pass leaves 512 dead rows
and index entries under the same TI ids, which the next passes would read (a committed pass
leaves its rows live, in flight, instead):
  dispatch 512   the dispatcher of 'celery' sending 512 (reading past q0's TIs in flight);
  dispatch none  the dispatcher of an executor with nothing queued ('bench_other': what a pass
             of an idle dispatcher costs beside the others' backlog).
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
DISPATCH_CASES = (("dispatch 512", "celery", 512), ("dispatch none", "bench_other", 512))


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
        c.execute(sa.text("INSERT INTO ti_dispatch (ti_id, executor, queued_at, token, attempt, sent_at) "
                          "SELECT id, executor, queued_at, 'bench', 1, now() FROM task_instance "
                          "WHERE state = 'queued' AND executor = 'celery' AND queue = 'q0'"))
        c.execute(sa.text("INSERT INTO executor (name) VALUES ('bench_other')"))
        c.execute(sa.text("ANALYZE TABLE task_instance" if db.is_mysql_url(str(eng.url)) else "ANALYZE task_instance"))
        return c.execute(sa.text("SELECT count(*) FROM task_instance")).scalar_one()


def measure(eng, n: int, query: str, **params) -> tuple[list[float], int]:
    """`n` calls of the named query, each its own transaction, rolled back: (seconds each, rows)."""
    took, got = [], 0
    with eng.connect() as conn:
        for _ in range(n):
            t = time.perf_counter()
            tx = conn.begin()
            got = len(db.run(conn, query, **params).all())
            tx.rollback()
            took.append(time.perf_counter() - t)
    return took, got


def alternated(engines: dict, n: int, before, query: str, **params) -> dict:
    """measure(), the engines' calls taking turns, before() untimed ahead of each:
    {key: (seconds each, rows)}."""
    out = {key: ([], 0) for key in engines}
    for _ in range(n):
        for key, eng in engines.items():
            before()
            took, got = measure(eng, 1, query, **params)
            out[key] = (out[key][0] + took, got)
    return out


def vacuum(eng, table: str) -> None:
    if eng.dialect.name == "postgresql":  # MySQL/MariaDB: a rolled-back insert leaves nothing behind
        with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.execute(sa.text(f"VACUUM {table}"))


def figure(name: str, took: list[float], got: int) -> str:
    ms = [x * 1000 for x in took]
    return f"{name} ({got}) p50 {pct(ms, 50):.3f} p99 {pct(ms, 99):.3f} ms"


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
    ap.add_argument("--dispatch-versions", default="", help="comma-separated dispatch_tis versions, called in turn")
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
        for v in [int(x) for x in args.versions.split(",") if x]:
            pinned = calls.pin(eng, f"claim_tis={v}")
            parts = [figure(name, *measure(pinned, args.calls, "claim_tis", job_id=None, hostname="bench",
                                           queues=queues, limit=limit, log_dir="/tmp/bench-claim", now=None))
                     for name, queues, limit in cases]
            print(f"round {r + 1} claim_tis_v{v}: " + "; ".join(parts) + f"; {load()}", flush=True)
        versions = [int(x) for x in args.dispatch_versions.split(",") if x]
        pinned = {v: calls.pin(eng, f"dispatch_tis={v}") for v in versions}
        parts = {v: [] for v in versions}
        for name, executor, limit in DISPATCH_CASES if versions else ():
            got = alternated(pinned, args.calls, lambda: vacuum(eng, "ti_dispatch"), "dispatch_tis",
                             executor=executor, limit=limit, resend_after=3600.0, now=None)
            for v in versions:
                parts[v].append(figure(name, *got[v]))
        for v in versions:
            print(f"round {r + 1} dispatch_tis_v{v}: " + "; ".join(parts[v]) + f"; {load()}", flush=True)
    eng.dispose()


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    sys.exit(handle_errors(main)())
