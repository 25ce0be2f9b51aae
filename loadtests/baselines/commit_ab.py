"""A/B of queue_tis versions with every call committed, on one of bench_queue.py's worlds: the
versions take turns call by call (the order alternating round by round), each on a connection of
its own, and what a call queues is finished (a drain) or put back (small, blocked) before the next
call, as the benchmark does. Unlike drain_ab.py (every call on the same state, rolled back, the
TIs chosen compared), each call here leaves what it made behind, as in production: its skip
entries, and the dead rows of its scratch tables until it empties them. The versions see states a
call apart, so their choices are not compared.

    python loadtests/baselines/commit_ab.py URL WORLD ROUNDS VERSIONS [FILE.sql ...]
    WORLD: a number (a drain at max_tis 512 of that many scheduled TIs), small (50,000 scheduled,
           pools nearly full, max_tis 32) or blockedN (N blocked TIs ahead of 20,000, max_tis 32)
    e.g. ... postgresql+psycopg://postgres@127.0.0.1:5432/bench_ab 1000000 40 19,20

Extra functions (a prototype under a number no release uses) are installed from files first: on
PostgreSQL each file as a script, on MySQL/MariaDB each file one CREATE PROCEDURE (dropped first).
Prints each version's p50, mean and p90 per call (the first three rounds left out: a session plans
its statements afresh) and, against the first version, the median of the per-round ratios."""
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "loadtests"))
import sqlalchemy as sa  # noqa: E402

import bench_queue as bq  # noqa: E402
from engine import db  # noqa: E402

url, world, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
versions = [int(v) for v in sys.argv[4].split(",")]
eng = bq.bench_engine(url)
dialect = db.dialect_dir(eng)
bq.install_prototypes(eng, sys.argv[5:])
made, max_tis = bq.make_world(eng, world)
print(f"set-up of {made}; a 10^7-iteration Python loop takes {bq.machine_speed()} s [load {bq.load()}]", flush=True)
CALL = {"postgresql": "SELECT ti_id FROM queue_tis_v{v}(:m, NULL, NULL)", "mysql": "CALL queue_tis_v{v}(:m, NULL, NULL, 2)"}
# One engine (connection pool, one connection) per version: each keeps its own session.
engines = {v: db.make_engine(url) for v in versions}
times = {v: [] for v in versions}
for i in range(rounds):
    for v in (versions if i % 2 == 0 else versions[::-1]):
        t0 = time.perf_counter()
        with engines[v].begin() as c:
            ids = [r[0] for r in c.execute(sa.text(CALL[dialect].format(v=v)), {"m": max_tis})]
        times[v].append((time.perf_counter() - t0) * 1000)
        bq.settle(eng, ids, max_tis)
for v in versions:
    t = sorted(times[v][3:])
    print(f"{world}: queue_tis_v{v} p50 {statistics.median(t):.1f} ms, mean {statistics.mean(t):.1f}, "
          f"p90 {t[int(len(t) * 0.9)]:.1f} over {len(t)} calls")
for v in versions[1:]:
    r = sorted(b / a for a, b in zip(times[versions[0]][3:], times[v][3:]))
    print(f"v{v} / v{versions[0]}, call by call: median {statistics.median(r):.3f} "
          f"(quartiles {r[len(r) // 4]:.3f}-{r[3 * len(r) // 4]:.3f}) [load {bq.load()}]")
