"""Long version of tests/test_queue_concurrency.py: schedulers race queue_tis_v1 while
completers claim and finish, for --seconds; the invariant (no limit_usage row over its cap)
is checked in SQL after every step of every process, and no TI may be queued twice.

    python loadtests/soak_queue.py --seconds 600 --schedulers 6 --completers 3 [--database-url URL]

The world is re-created each round of --round-seconds so the backlog never runs dry.
Exits 1 when an invariant broke.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_latency import bench_engine  # noqa: E402
from tests.race import race, setup_world  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url")
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--round-seconds", type=float, default=30)
    ap.add_argument("--schedulers", type=int, default=4)
    ap.add_argument("--completers", type=int, default=2)
    ap.add_argument("--tis", type=int, default=2000)
    args = ap.parse_args()
    eng = bench_engine(args.database_url, prefix="engine-soak-")
    url = eng.url.render_as_string(hide_password=False)
    totals = {"rounds": 0, "queued": 0, "busy": 0, "finished": 0, "violations": 0, "queued_twice": 0}
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        setup_world(eng, args.tis)
        r = race(url, min(args.round_seconds, max(1.0, end - time.monotonic())), args.schedulers, args.completers)
        totals["rounds"] += 1
        totals["queued"] += r["queued"]
        totals["busy"] += r["busy"]
        totals["finished"] += r["finished"]
        totals["violations"] += len(r["violations"])
        totals["queued_twice"] += r["queued"] - r["distinct_queued"]
        print(json.dumps({"round": totals["rounds"], **{k: v for k, v in r.items() if k != "violations"},
                          "violations": len(r["violations"])}), flush=True)
    print(json.dumps({"total": totals}))
    ok = totals["violations"] == 0 and totals["queued_twice"] == 0
    print("invariants held" if ok else "INVARIANT BROKEN")
    return 0 if ok else 1


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    sys.exit(handle_errors(main)())
