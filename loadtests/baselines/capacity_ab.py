"""A/B of queue_tis versions on a world bench_queue.py set up (its engine tables): calls of each
version interleaved, so both see the same load. python loadtests/baselines/capacity_ab.py URL
small|blocked5000|100000 4,5 N (small/blocked: max_tis 32; a number: 512)."""
import sys, statistics, os
from pathlib import Path
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "loadtests"))
import bench_queue as b
from engine import db
url, work, versions, n = sys.argv[1], sys.argv[2], [int(v) for v in sys.argv[3].split(",")], int(sys.argv[4])
# One engine (connection pool) per version: a session that ever called v4 truncates its
# ON COMMIT DELETE ROWS scratch tables at every commit, also of a v5 call.
engines = {v: db.make_engine(url) for v in versions}
mt = 512 if work.isdigit() else 32
times = {v: [] for v in versions}
for i in range(n):
    order = versions if i % 2 == 0 else versions[::-1]
    for v in order:
        b.VERSION = v
        ids, dt = b.call(engines[v], mt); times[v].append(dt * 1000)
        b.set_state(engines[v], ids, "scheduled", clear_queued=True)
for v in versions:
    t = sorted(times[v])
    print(f"{work} v{v}: p50 {statistics.median(t):.1f} ms, p90 {t[int(len(t)*0.9)]:.1f} ms over {n} calls interleaved [load {b.load()}]", flush=True)
