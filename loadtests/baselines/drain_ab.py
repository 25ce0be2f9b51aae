"""A/B of queue_tis functions on bench_queue.py's "sizes" world, on the same state: each round calls
every version once (order alternating), each call rolled back, times them and compares the TIs
each chose (they must be the same: every version decides the greedy rule); then one call of the
first version is committed and its TIs set to success, so the drain moves on round by round.
Extra functions (a prototype under a number no release uses) can be installed from files first.

    python loadtests/baselines/drain_ab.py URL SIZE ROUNDS VERSIONS [FILE.sql ...]
    e.g. ... postgresql+psycopg://postgres@127.0.0.1:5432/proto_bench 1000000 16 18,90,91 /tmp/qt90.sql

One engine (connection pool) per version: PL/pgSQL plans its statements afresh for the first
calls of a session, so versions sharing a rotating pool would not be warmed alike. The first
version is the reference: a round where another chose differently is printed (DIFF).

Every round ends with a committed call of each version that may queue nothing (max_tis 0). Without
it the timings favoured the first version, the only one whose calls were ever committed
(PostgreSQL, 100,000: v19 38.7 and v20 56.4 ms a call with v19 first, v20 42.2 and v19 62.1 with
v20 first): a PostgreSQL function creates its scratch tables at the first call of a session, and
a session whose calls were all rolled back created them again, and planned every statement
afresh, at every call (and a rolled-back DELETE of their rows leaves them to the next call). With
that call the gap shrank but did not close (v19 40.1 / v20 42.0 with v19 first, v20 47.9 / v19
57.1 with v20 first; cause not found): compare timings of one role only, or use commit_ab.py
(every call committed). This harness is for the TIs chosen."""
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

url, size, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
versions = [int(v) for v in sys.argv[4].split(",")]
eng = bq.bench_engine(url)
bq.install_prototypes(eng, sys.argv[5:])
engines = {v: db.make_engine(url) for v in versions}
print(f"set-up of {size:,} scheduled TIs: {bq.setup(eng, size):.1f} s; a 10^7-iteration Python loop takes "
      f"{bq.machine_speed()} s [load {bq.load()}]", flush=True)
CALL = {"postgresql": "SELECT ti_id FROM queue_tis_v{v}(:m, NULL, NULL)", "mysql": "CALL queue_tis_v{v}(:m, NULL, NULL, 2)"}


def call(v: int, commit: bool = False, max_tis: int = 512) -> tuple[set, float]:
    with engines[v].connect() as c:
        t = c.begin()
        t0 = time.perf_counter()
        ids = {r[0] for r in c.execute(sa.text(CALL[db.dialect_dir(c)].format(v=v)), {"m": max_tis})}
        dt = time.perf_counter() - t0
        (t.commit if commit else t.rollback)()
    return ids, dt


times = {v: [] for v in versions}
diffs = 0
for i in range(rounds):
    chose = {}
    for v in (versions if i % 2 == 0 else versions[::-1]):
        chose[v], dt = call(v)
        times[v].append(dt * 1000)
    for v in versions[1:]:
        if chose[v] != chose[versions[0]]:
            diffs += 1
            print(f"DIFF round {i}: v{v} chose {len(chose[v] - chose[versions[0]])} TIs v{versions[0]} did not, "
                  f"and left {len(chose[versions[0]] - chose[v])} it chose", flush=True)
    # (A committed call that may queue nothing: each session's scratch tables are created and
    # emptied for good, as a committed call leaves them, and the world does not move.)
    for v in versions:
        call(v, commit=True, max_tis=0)
    ids, _ = call(versions[0], commit=True)
    if not ids:
        break
    bq.set_state(eng, list(ids), "success")
for v in versions:
    print(f"{size:,}: queue_tis_v{v} median {statistics.median(times[v]):.1f} ms over {len(times[v])} calls of 512")
print(f"rounds where a version chose differently from v{versions[0]}: {diffs} [load {bq.load()}]")
