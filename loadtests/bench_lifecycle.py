"""The database side of a TI's life, without processes: no-op TIs of triggered runs driven to
`success` through create_dag_runs -> schedule_tis -> queue_tis -> claim_tis -> finish_ti.

    python loadtests/bench_lifecycle.py [--dialect postgresql|mysql] [--database-url URL]
                                        [--runs 500] [--tasks 20] [--workers 4] [--claim 64] [--per-ti]
                                        [--procedure-versions 'finish_tis=2']

A fresh database (`bench_lifecycle` on the local server of the dialect unless --database-url
names one: that database is DROPPED and re-created) gets one DAG of --tasks independent no-op
tasks (limits opened wide: pool unlimited, executor parallelism 100,000, max_active_runs and
max_active_tasks high) and --runs triggered runs. Then, in this process, one scheduler thread
calls the scheduler's steps in a loop (each its own transaction, as `engine tick` does) while
--workers worker threads claim up to --claim TIs at a time and report them as exit 0
in one finish_tis call (what a worker does when several tries end together; --per-ti: one
finish_ti call each, all of one claim's in one transaction, as before finish_tis_v1). No task
runs: it is the procedures' and the round trips' cost.

Prints TIs/s from the first trigger to the last `success`, the share of each step, and the
load average. Every TI must end `success` and every run `success` (checked: the bench fails
otherwise).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from engine import calls, db, migrate  # noqa: E402
from engine.scheduler import queue_knobs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_latency import fresh_database, load  # noqa: E402

DEFAULT_URLS = {"postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/bench_lifecycle",
                "mysql": "mysql+pymysql://root@127.0.0.1:3306/bench_lifecycle"}


def setup(eng, tasks: int) -> None:
    """One DAG of `tasks` independent BashTasks, stored with the engine's own named statements."""
    with db.connect(eng) as c:
        db.run(c, "pools_set", name="default_pool", slots=-1, include_deferred=False, description="",
               preempt_margin=None)
    with eng.begin() as c:
        c.execute(sa.text("UPDATE executor SET parallelism = 100000"))
        c.execute(sa.text(
            "INSERT INTO dag (dag_id, fileloc, max_active_runs, max_active_tasks, is_active, is_paused) "
            "VALUES ('bench_life', '/dev/null', 100000, 100000, true, false)"))
        for i in range(tasks):
            c.execute(sa.text("INSERT INTO task (dag_id, task_id, kind, bash_command, pool) "
                              "VALUES ('bench_life', :t, 'bash', 'true', 'default_pool')"), {"t": f"t{i:03d}"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dialect", choices=sorted(DEFAULT_URLS), default="postgresql")
    ap.add_argument("--database-url")
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--claim", type=int, default=64)
    ap.add_argument("--per-ti", action="store_true", help="report each TI with its own finish_ti call (as before "
                    "finish_tis_v1), all of one claim's in one transaction")
    ap.add_argument("--procedure-versions", default="", help="pin versions as the setting procedure_versions "
                    "does, e.g. 'finish_tis=2' (default: the newest installed)")
    args = ap.parse_args()
    url = args.database_url or DEFAULT_URLS[args.dialect]
    fresh_database(url)
    eng = db.make_engine(url, pool_size=args.workers + 4)
    migrate.upgrade(eng)
    eng = calls.pin(eng, args.procedure_versions)
    setup(eng, args.tasks)
    total = args.runs * args.tasks
    spent: dict[str, list[float]] = defaultdict(list)
    lock = threading.Lock()
    done = threading.Event()

    def timed(name, fn):
        t = time.perf_counter()
        out = fn()
        with lock:
            spent[name].append(time.perf_counter() - t)
        return out

    def step(name, fn):
        try:
            with db.connect(eng) as c:
                return timed(name, lambda: fn(c))
        except sa.exc.DBAPIError as exc:
            if db.is_lock_busy(exc) or db.is_transient(exc):
                with lock:
                    spent["busy/deadlock " + name].append(0.0)
                return False
            raise

    finished = [0]

    def scheduler():
        while not done.is_set():
            step("create_dag_runs", lambda c: db.run(c, "create_dag_runs", now=None).all())
            step("schedule_tis", lambda c: db.run(c, "schedule_tis", now=None, batch=1000).all())
            q = step("queue_tis", lambda c: db.run(c, "queue_tis", max_tis=2048, job_id=None, now=None,
                                                                  **queue_knobs()).all())
            if not q:
                time.sleep(0.002)

    def worker(n):
        while not done.is_set():
            rows = step("claim_tis", lambda c: db.run(
                c, "claim_tis", job_id=None, hostname=f"bench{n}", queues=["default"], limit=args.claim,
                log_dir="/tmp/bench-lifecycle", now=None).all()) or []
            if not rows:
                time.sleep(0.002)
                continue

            def finish(c):
                if args.per_ti:
                    states = [db.run(c, "finish_ti", ti_id=r.ti_id, try_number=r.try_number, exit_code=0,
                                     timed_out=False, reason=None, now=None).scalar_one() for r in rows]
                else:
                    states = db.run(c, "finish_tis", ti_ids=[r.ti_id for r in rows],
                                    try_numbers=[r.try_number for r in rows], exit_codes=[0] * len(rows),
                                    timed_outs=[False] * len(rows), reasons=[None] * len(rows),
                                    results=[None] * len(rows), now=None, max_bytes=None)
                    states = [r.state for r in states]
                assert states == ["success"] * len(rows), states
                return True
            name = "finish_ti" if args.per_ti else "finish_tis"
            while step(name, finish) is False:  # a deadlock or lock timeout: report them again
                pass
            with lock:
                finished[0] += len(rows)

    print(f"bench_lifecycle on {eng.dialect.name}: {args.runs} runs x {args.tasks} no-op tasks = {total} TIs, "
          f"1 scheduler thread + {args.workers} worker threads (claim {args.claim}); {load()}")
    failures = []

    def guarded(fn, *a):
        try:
            fn(*a)
        except BaseException as exc:  # noqa: BLE001 - ends the bench with it
            failures.append(exc)
            done.set()
            raise

    threads = [threading.Thread(target=guarded, args=(scheduler,))] + [
        threading.Thread(target=guarded, args=(worker, i)) for i in range(args.workers)]
    start = time.perf_counter()
    for i in range(args.runs):
        with db.connect(eng) as c:
            timed("trigger_dag", lambda: db.run(c, "trigger_dag", dag_id="bench_life", run_id=f"r{i}",
                                                conf=json.dumps({}), now=None).one())
    for t in threads:
        t.start()
    try:
        while True:
            with eng.connect() as c:
                open_runs = c.execute(sa.text("SELECT count(*) FROM dag_run WHERE state NOT IN ('success', 'failed')")).scalar()
            if open_runs == 0 or failures:
                break
            time.sleep(0.05)
    finally:
        done.set()
        for t in threads:
            t.join()
    wall = time.perf_counter() - start
    if failures:
        raise SystemExit(f"a bench thread failed: {failures[0]!r}")
    with eng.connect() as c:
        states = dict(c.execute(sa.text("SELECT state, count(*) FROM task_instance GROUP BY state")).all())
        runs = dict(c.execute(sa.text("SELECT state, count(*) FROM dag_run GROUP BY state")).all())
    if states != {"success": total} or runs != {"success": args.runs} or finished[0] != total:
        raise SystemExit(f"not every TI ended success exactly once: TIs {states}, runs {runs}, reported {finished[0]}")
    print(f"{total} TIs triggered -> success in {wall:.2f} s: {total / wall:.0f} TIs/s; {load()}")
    for name, times in spent.items():
        print(f"  {name:16} calls {len(times):6}  total {sum(times):7.2f} s  p50 {statistics.median(times) * 1000:7.2f} ms")
    eng.dispose()


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    handle_errors(main)()
