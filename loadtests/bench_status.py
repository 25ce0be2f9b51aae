"""What `engine status` and `engine metrics` (the Prometheus endpoint's scrape) cost with a large
backlog: bench_queue.py's world of --backlog scheduled TIs (1,000 running runs, 20 pools), then,
--rounds times each, the named queries `metrics` and `status_pending` as the CLI sends them, and
the view pending_counts alone. With --before, also the metrics view as revision 0008 defined it
(sql/<dialect>/previous/0061/metrics.sql, installed as metrics_0008 and dropped afterwards),
which read the scheduled TIs six times, three of them per TI through pending_reasons; and that
per-TI count by reason alone. Prints medians in seconds, the machine's speed and load.

    python loadtests/bench_status.py --database-url URL [--backlog 1000000] [--rounds 3] [--before]

The world empties the engine tables of the database: never point it at a deployment."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_queue as bq  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from engine import db  # noqa: E402
from tests.helpers import metrics_0008_sql  # noqa: E402


def timed(eng, work, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        with db.connect(eng) as conn:
            work(conn)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url")
    ap.add_argument("--backlog", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before", action="store_true", help="also time revision 0008's metrics view (slow)")
    a = ap.parse_args()
    eng = bq.bench_engine(a.database_url)
    print(f"{eng.dialect.name}: {bq.make_world(eng, str(a.backlog))[0]}; a 10^7-iteration Python loop takes "
          f"{bq.machine_speed()} s [load {bq.load()}]", flush=True)
    cases = [("named query metrics (engine metrics, a scrape)", lambda c: db.run(c, "metrics").all()),
             ("named query status_pending (engine status, 'why pending')", lambda c: db.run(c, "status_pending").all()),
             ("SELECT * FROM pending_counts", lambda c: c.execute(sa.text("SELECT * FROM pending_counts")).all())]
    if a.before:
        with eng.begin() as c:
            c.exec_driver_sql("DROP VIEW IF EXISTS metrics_0008")
            c.exec_driver_sql(metrics_0008_sql(db.dialect_dir(eng)))
        cases += [("revision 0008's metrics view (before)",
                   lambda c: c.execute(sa.text("SELECT * FROM metrics_0008")).all()),
                  ("pending_reasons counted by pool and reason (per TI)",
                   lambda c: c.execute(sa.text("SELECT pool, reason, COUNT(*) FROM pending_reasons "
                                               "GROUP BY pool, reason")).all())]
    try:
        for label, work in cases:
            print(f"{label}: median {timed(eng, work, a.rounds):.2f} s of {a.rounds} [load {bq.load()}]", flush=True)
    finally:
        if a.before:
            with eng.begin() as c:
                c.exec_driver_sql("DROP VIEW IF EXISTS metrics_0008")
    return 0


if __name__ == "__main__":
    sys.exit(main())
