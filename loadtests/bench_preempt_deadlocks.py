"""Deadlocks between preempt and workers' heartbeats: tests/race.py with preemption on, the
schedulers pinned to each version of --versions in turn (default 1,2,3; the last one the named
query calls), back to back, --rounds times each.
Prints per round the deadlocks the server broke (error 1213 / 40P01, in schedulers' preempt
calls and workers' heartbeats), the preemptions and the tries claimed, with the load average.

    python loadtests/bench_preempt_deadlocks.py --database-url mysql+pymysql://root@127.0.0.1:3306/x \
        [--seconds 15] [--rounds 2]

Exits 1 when an invariant broke (a limit over its cap, a try claimed twice).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine import db, migrate  # noqa: E402
from tests.race import race, setup_world  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url", required=True)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--schedulers", type=int, default=4)
    ap.add_argument("--completers", type=int, default=3)
    ap.add_argument("--versions", default="1,2,3", help="comma-separated preempt versions to race in turn")
    args = ap.parse_args()
    eng = db.make_engine(args.database_url)
    migrate.upgrade(eng)
    broken = False
    for n in range(args.rounds):
        for v in [int(x) for x in args.versions.split(",")]:
            label, pins = f"preempt_v{v}", f"preempt={v}"
            setup_world(eng, n_tis=400, preempt=True)
            r = race(args.database_url, args.seconds, args.schedulers, args.completers, preempt=True, pins=pins)
            broken |= bool(r["violations"]) or r["claimed"] != r["distinct_claimed"] or r["exit_codes"] != \
                [0] * (args.schedulers + args.completers)
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"round {n + 1} {label}: deadlocks={r['deadlocks']} preempted={r['preempted']} "
                  f"claimed={r['claimed']} busy={r['busy']} exit={r['exit_codes']} (load {load})", flush=True)
    eng.dispose()
    return 1 if broken else 0


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    sys.exit(handle_errors(main)())
