"""Benchmark of one fire_triggers call: a triggerer's batch of N fired triggers, by what they do.

    python loadtests/bench_fire_batch.py [--database-url URL] [--triggers 1000] [--runs 3]
                                         [--procedure-versions fire_triggers=1,fire_triggers=2]

For each run and each kind of batch, N running TIs are deferred to N triggers (through defer_ti,
as workers report it; the set-up of bench_triggerer.py), then one `fire_triggers` named-query call
reports all N at once, committed, and its wall time is taken:
  * resume  - plain events: each TI resumes (queued, its pool has include_deferred);
  * success - final events: each try ends as success with the event as its result;
  * error   - errors: each try fails (retried or failed).
Each entry of --procedure-versions is measured in turn within a run (alternated, so that a
machine whose speed drifts favours none); the default is the version the named query calls.
Prints the median per kind and version, and the machine's load average. Without --database-url
it uses a throw-away embedded PostgreSQL; its engine tables are emptied otherwise.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import sqlalchemy as sa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_triggerer  # noqa: E402
from bench_latency import bench_engine  # noqa: E402
from engine import calls, db  # noqa: E402

KINDS = {  # kind: (event, error, final) of every trigger in the batch
    "resume": ('{"v": 1}', None, None),
    "success": ('{"v": 1}', None, "success"),
    "error": (None, "the trigger raised", None),
}


def one_call(eng, n: int, kind: str) -> tuple[float, dict]:
    """Set up N deferred TIs, report all N triggers in one call; (ms, {state: count})."""
    bench_triggerer.setup(eng, n, 3600, 0)
    trig = "trigger" if eng.dialect.name == "postgresql" else "`trigger`"
    with eng.connect() as c:
        ids = list(c.execute(sa.text(f"SELECT id FROM {trig} ORDER BY id")).scalars())
    event, error, final = KINDS[kind]
    start = time.perf_counter()
    with db.connect(eng) as conn:
        rows = db.run(conn, "fire_triggers", trigger_ids=ids, events=[event] * n, errors=[error] * n,
                      finals=[final] * n, now=None, boost=0, max_bytes=65536).all()
    ms = (time.perf_counter() - start) * 1000
    counts: dict = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    return ms, counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url", help="a PostgreSQL or MySQL/MariaDB database (its engine tables are emptied!)")
    ap.add_argument("--triggers", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--procedure-versions", default="",
                    help="comma-separated NAME=VERSION entries, each measured in turn (e.g. "
                         "fire_triggers=1,fire_triggers=2); default: the named query's version")
    args = ap.parse_args()
    eng = bench_engine(args.database_url)
    pins = [p.strip() for p in args.procedure_versions.split(",") if p.strip()] or [""]
    engines = {p: calls.pin(eng, p) for p in pins}
    load_before = os.getloadavg()
    times: dict = {}
    for _ in range(args.runs):
        for kind in KINDS:
            for pin, e in engines.items():
                ms, counts = one_call(e, args.triggers, kind)
                times.setdefault((kind, pin), []).append(ms)
                print(f"{kind:8} {pin or 'named query':18} {ms:9.1f} ms  {counts}", flush=True)
    print(f"\n{args.triggers:,} triggers in one call, median of {args.runs} ({eng.dialect.name}):")
    for (kind, pin), xs in times.items():
        print(f"  {kind:8} {pin or 'named query':18} p50 {statistics.median(xs):9.1f} ms")
    print(f"load average (1/5/15 min, {os.cpu_count()} CPUs) before {[round(x, 2) for x in load_before]}, "
          f"after {[round(x, 2) for x in os.getloadavg()]}")
    eng.dispose()
    return 0


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    sys.exit(handle_errors(main)())
