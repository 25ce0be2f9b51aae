"""A surge of new runs while the planner's statistics lag (issue 11, item 6).

    python loadtests/bench_surge.py [--database-url URL] [--limit-seconds 300]
                                    [--modes stale,analyzed,engine]

The world of bench_queue.py (50 DAGs of 20 tasks, 20 pools, 1,000 running runs, 50,000 TIs) is
loaded and ANALYZEd; then every run and TI is deleted and 1,000 new runs of 50 TIs each (state
'none', as a run's TIs are when it starts) are created in their place, and the time to get them
all `scheduled` (schedule_tis calls, batch 100, as `engine scheduler` makes them) and then
`queued` (queue_tis at max_tis 512, every queued TI completed before the next call) is measured.
Modes, each on a fresh surge:

  * stale: nothing refreshes the statistics (PostgreSQL: autovacuum off on the engine's tables
    meanwhile; MySQL/MariaDB: InnoDB's automatic recalculation left as the server has it);
  * analyzed: `ANALYZE` right after the surge (what an operator did to end the incident);
  * engine: the scheduler's own statistics step (`analyze_stale`, sql/<dialect>/
    analyze_stale_vN.sql) runs before every pass, as `engine scheduler` and `engine tick` run
    it; autovacuum off as in `stale`.

Prints seconds and calls per phase with the machine's load average beside them. Without
--database-url: bench_surge on the local PostgreSQL server (DROPPED and re-created); for
MariaDB pass mysql+pymysql://root@127.0.0.1:3306/bench_surge.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import bench_queue as bq  # noqa: E402
from bench_latency import fresh_database  # noqa: E402
from engine import db, migrate  # noqa: E402
from engine.scheduler import queue_knobs  # noqa: E402

N = 50_000
AUTOVACUUM = {"off": "ALTER TABLE {t} SET (autovacuum_enabled = false)", "on": "ALTER TABLE {t} RESET (autovacuum_enabled)"}


def surge(eng) -> None:
    dialect = db.dialect_dir(eng)
    text = bq.SURGE[dialect].replace("'scheduled',", "'none',").format(
        dags=bq.DAGS, runs=bq.RUNS, tasks=bq.TASKS, n=N, seq_runs=bq.seq(bq.RUNS), seq_n=bq.seq(N))
    with eng.begin() as c:
        bq.script(c, text)


def autovacuum(eng, on: bool) -> None:
    if db.dialect_dir(eng) != "postgresql":
        return
    with eng.begin() as c:
        for t in ("task_instance", "dag_run", "task_instance_history"):
            c.exec_driver_sql(AUTOVACUUM["on" if on else "off"].format(t=t))


def analyze(eng) -> None:
    with eng.begin() as c:
        if db.dialect_dir(eng) == "postgresql":
            c.exec_driver_sql("ANALYZE task_instance, dag_run")
        else:
            c.exec_driver_sql("ANALYZE TABLE task_instance, dag_run")


def engine_step(eng) -> list:
    with db.connect(eng) as c:
        return db.run(c, "analyze_stale", fraction=0.1, min_rows=1000).all()


CANCEL = {"postgresql": ("SELECT pg_backend_pid()", "SELECT pg_cancel_backend({pid})"),
          "mysql": ("SELECT CONNECTION_ID()", "KILL QUERY {pid}")}


def timed(eng, conn, seconds: float):
    """A timer that cancels the statement running on `conn` after `seconds` (a call planned on
    stale statistics can run for many minutes)."""
    get, cancel = CANCEL[db.dialect_dir(eng)]
    pid = conn.exec_driver_sql(get).scalar()

    def fire():
        with eng.connect() as other:
            other.exec_driver_sql(cancel.format(pid=int(pid)))
    timer = threading.Timer(max(seconds, 0.01), fire)
    timer.start()
    return timer


def phase(eng, name: str, step, limit: float) -> dict:
    """Call `step(seconds left)` until it reports nothing more to do, or until `limit` s (the
    call then running is cancelled); seconds, calls, TIs done."""
    start, calls, done, cut = time.perf_counter(), 0, 0, False
    while True:
        left = limit - (time.perf_counter() - start)
        if left <= 0:
            cut = True
            break
        try:
            n = step(left)
        except sa.exc.DBAPIError:
            cut = True  # cancelled at the limit
            break
        calls += 1
        done += n
        if n == 0 and calls > 1:
            break
    return {"phase": name, "seconds": round(time.perf_counter() - start, 2), "calls": calls, "tis": done,
            "cut": cut}


def run_mode(eng, mode: str, limit: float) -> list[dict]:
    bq.setup(eng, N)
    autovacuum(eng, on=mode == "analyzed")
    try:
        surge(eng)
        if mode == "analyzed":
            analyze(eng)
        refresh = mode == "engine"

        def schedule(left: float) -> int:
            if refresh:
                engine_step(eng)
            with db.connect(eng) as c:
                timer = timed(eng, c, left)
                try:
                    return db.run(c, "schedule_tis", now=None, batch=100).one().tis_scheduled
                finally:
                    timer.cancel()

        def queue(left: float) -> int:
            if refresh:
                engine_step(eng)
            with db.connect(eng) as c:
                timer = timed(eng, c, left)
                try:
                    ids = [r.ti_id for r in db.run(c, "queue_tis", max_tis=512, job_id=None, now=None, **queue_knobs())]
                finally:
                    timer.cancel()
            if ids:
                bq.set_state(eng, ids, "success")
            return len(ids)

        out = [phase(eng, "scheduled", schedule, limit), phase(eng, "queued", queue, limit)]
    finally:
        autovacuum(eng, on=True)
    for o in out:
        o["load"] = bq.load()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/bench_surge")
    ap.add_argument("--modes", default="stale,analyzed,engine")
    ap.add_argument("--limit-seconds", type=float, default=300.0, help="stop a phase after this long")
    args = ap.parse_args()
    fresh_database(args.database_url)
    eng = db.make_engine(args.database_url)
    migrate.upgrade(eng)
    print(f"bench_surge on {eng.dialect.name} "
          f"({sa.engine.make_url(args.database_url).render_as_string(hide_password=True)}): 1,000 runs x 50 TIs "
          f"replaced; load {bq.load()}", flush=True)
    for mode in args.modes.split(","):
        for r in run_mode(eng, mode, args.limit_seconds):
            cut = f" (stopped at --limit-seconds {args.limit_seconds:g}, a call cancelled)" if r["cut"] else ""
            print(f"{mode:9s} {r['phase']:9s}: {r['tis']:6d} TIs in {r['seconds']:7.2f} s, {r['calls']:4d} calls{cut}; "
                  f"load {r['load']}", flush=True)
    eng.dispose()
    return 0


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    sys.exit(handle_errors(main)())
