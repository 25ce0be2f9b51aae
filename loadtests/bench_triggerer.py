"""Benchmark of the triggerer: many concurrent time triggers in one `engine triggerer` process.

    python loadtests/bench_triggerer.py [--database-url URL] [--triggers 10000] [--spread 10] [--lead 20]

N running TIs defer (through defer_ti_v2, as workers report it) to DateTimeTriggers whose moments
are spread evenly over `spread` seconds, starting `lead` seconds after set-up ends (by the database
clock); their pool has include_deferred, so fire_triggers (v2) queues each one at once. One real
`engine triggerer` process claims them all, holds them as asyncio tasks and fires them. It measures
  * fire-to-queued latency per TI: task_instance.queued_at - the trigger's moment (both by the
    database clock): p50, p90, p99, max;
  * how long the triggerer took to claim all N, and its memory: RSS while it holds all N
    triggers, and its peak RSS (VmHWM) at the end.
`--spread 0` fires all N at the same instant (the worst case): the triggerer reports them in
batches (fire_triggers, up to 1,000 triggers per call). The machine's load average is printed
beside the figures (the machine may be shared). Writes
loadtests/results/bench_triggerer.json (bench_triggerer_mysql.json on MySQL/MariaDB). Without
--database-url it uses a throw-away embedded PostgreSQL; its engine tables are emptied otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_latency import bench_engine  # noqa: E402
from engine import db  # noqa: E402

TABLES = ["task_instance_history", "task_instance", "dag_run", "task_dependency", "task", "dag", "job"]


def setup(eng, n: int, lead: float, spread: float) -> dict[int, datetime]:
    """N running TIs, each deferred to a DateTimeTrigger; returns ti id -> its trigger's moment."""
    trig = "`trigger`" if eng.dialect.name != "postgresql" else "trigger"
    with eng.begin() as c:
        for table in [trig] + TABLES:
            c.execute(sa.text(f"DELETE FROM {table}"))
        c.execute(sa.text("DELETE FROM pool WHERE name = 'bench'"))
        c.execute(sa.text("INSERT INTO pool (name, slots, include_deferred) VALUES ('bench', :n, true)"), {"n": n})
        c.execute(sa.text("UPDATE executor SET parallelism = NULL"))
        c.execute(sa.text("INSERT INTO dag (dag_id, fileloc, max_active_tasks) VALUES ('bench', 'bench', NULL)"))
        c.execute(sa.text("INSERT INTO task (dag_id, task_id, kind, python_callable, pool) "
                          "VALUES ('bench', 'wait', 'python', 'x:y', 'bench')"))
        now = c.execute(sa.text("SELECT now()")).scalar()
        c.execute(sa.text("INSERT INTO dag_run (id, dag_id, run_id, run_type, state, run_after, created_at) "
                          "VALUES (1, 'bench', 'r', 'manual', 'running', :t, :t)"), {"t": now})
        c.execute(sa.text("INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, "
                          "try_number, priority_weight, pool, pool_slots, queue, executor, run_after, start_date) "
                          "VALUES (:id, 1, 'bench', 'r', 'wait', :m, 'running', 1, 1, 'bench', 1, 'default', "
                          "'default', :t, :t)"), [{"id": i + 1, "m": i, "t": now} for i in range(n)])
    ids = range(1, n + 1)
    for k in range(0, n, 1000):
        with db.connect(eng) as c:
            for i in ids[k:k + 1000]:
                db.run(c, "defer_ti", ti_id=i, try_number=1, classpath="engine.triggers:DateTimeTrigger",
                       trigger_kwargs=json.dumps({"moment": "2999-01-01T00:00:00+00:00"}), method="resume",
                       next_kwargs="{}", timeout=None, now=None)
    # The moments, counted from the end of the set-up (which takes longer than --lead on a slow
    # machine): set in one statement, moment of TI i = first + spread * (i - 1) / (n - 1).
    step = spread / max(n - 1, 1)
    with eng.begin() as c:
        first = c.execute(sa.text("SELECT now()")).scalar() + timedelta(seconds=lead)
        if eng.dialect.name == "postgresql":
            c.execute(sa.text("UPDATE trigger SET kwargs = jsonb_build_object('moment', to_char((CAST(:first AS "
                              "timestamptz) + (ti_id - 1) * make_interval(secs => :step)) AT TIME ZONE 'UTC', "
                              "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"'))"), {"first": first, "step": step})
        else:
            c.execute(sa.text("UPDATE `trigger` SET kwargs = JSON_OBJECT('moment', CONCAT(DATE_FORMAT(DATE_ADD("
                              ":first, INTERVAL ROUND((ti_id - 1) * :step_us) MICROSECOND), '%Y-%m-%dT%H:%i:%s.%f'), "
                              "'+00:00'))"), {"first": first, "step_us": step * 1e6})
    # A fresh start for the tables each run (this bench rewrites them every run; a server with
    # autovacuum off would otherwise plan on hundreds of thousands of dead rows).
    with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        for table in ("task_instance", trig):
            pg = eng.dialect.name == "postgresql"
            c.execute(sa.text(f"VACUUM ANALYZE {table}" if pg else f"ANALYZE TABLE {table}"))
    moments = {i: first + timedelta(microseconds=round((i - 1) * step * 1e6)) for i in ids}
    return moments


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(p / 100 * len(values)) - 1))]


def clock_now(moments: dict) -> datetime:
    """This host's clock (the database's, which runs here), aware or naive (UTC) as the moments are."""
    now = datetime.now(timezone.utc)
    return now if next(iter(moments.values())).tzinfo else now.replace(tzinfo=None)


def count(eng, text: str) -> int:
    with eng.connect() as c:
        return c.execute(sa.text(text)).scalar()


def run(url: str, n: int, lead: float, spread: float) -> dict:
    eng = db.make_engine(url)
    trig = "`trigger`" if eng.dialect.name != "postgresql" else "trigger"
    t0 = time.monotonic()
    moments = setup(eng, n, lead, spread)
    setup_s = time.monotonic() - t0
    env = {**os.environ, "ENGINE_DATABASE_URL": url, "PYTHONPATH": str(REPO), "ENGINE_TRIGGERER_CAPACITY": str(n),
           "ENGINE_TRIGGERER_POLL_INTERVAL": "1", "ENGINE_HOME": tempfile.mkdtemp(prefix="engine-bench-trig-")}
    env["ENGINE_DAGS_FOLDER"] = env["ENGINE_HOME"]  # the DAG's fileloc 'bench' is relative to it
    log = Path(env["ENGINE_HOME"]) / "triggerer.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", "triggerer"], env=env, cwd=REPO,
                                stdout=out, stderr=subprocess.STDOUT)
    started = time.monotonic()
    claim_s = rss_holding = all_seen_ms = claimed_late = None
    samples = []
    try:
        deadline = started + lead + spread + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"the triggerer exited ({proc.returncode}); see {log}")
            if claim_s is None and count(eng, f"SELECT count(*) FROM {trig} WHERE triggerer_job_id IS NOT NULL") >= n:
                claim_s = time.monotonic() - started
                claimed_late = clock_now(moments) > min(moments.values())  # the latency includes the claim
                time.sleep(0.5)
                rss_holding = rss_kb(proc.pid)
            samples.append(rss_kb(proc.pid))
            if count(eng, "SELECT count(*) FROM task_instance WHERE state = 'queued'") >= n:
                # committed and visible (to within this loop's 0.25 s), after the last moment
                all_seen_ms = (clock_now(moments) - max(moments.values())).total_seconds() * 1000
                break
            time.sleep(0.25)
        peak = rss_kb(proc.pid, "VmHWM")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    with eng.connect() as c:
        queued = dict(c.execute(sa.text("SELECT id, queued_at FROM task_instance WHERE state = 'queued'")).all())
    eng.dispose()
    lat = [(queued[i] - m).total_seconds() * 1000 for i, m in moments.items() if i in queued]
    return {
        "triggers": n, "spread_s": spread, "resumed": len(lat), "setup_s": round(setup_s, 1),
        "claim_all_s": None if claim_s is None else round(claim_s, 2), "claimed_after_first_moment": claimed_late,
        "all_queued_visible_ms": None if all_seen_ms is None else round(all_seen_ms),
        "fire_to_queued_ms": {"p50": round(percentile(lat, 50), 1), "p90": round(percentile(lat, 90), 1),
                              "p99": round(percentile(lat, 99), 1), "max": round(max(lat), 1),
                              "mean": round(statistics.fmean(lat), 1)} if lat else None,
        "rss_mb_holding_all": None if rss_holding is None else round(rss_holding / 1024, 1),
        "rss_mb_peak": round(peak / 1024, 1),
        "rss_mb_max_sampled": round(max(samples or [0]) / 1024, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url", help="a PostgreSQL or MySQL/MariaDB database (its engine tables are emptied!)")
    ap.add_argument("--triggers", type=int, default=10000)
    ap.add_argument("--spread", default="10,0", help="comma-separated: seconds over which the moments are spread")
    ap.add_argument("--lead", type=float, default=20, help="seconds from set-up to the first moment")
    ap.add_argument("--out")
    args = ap.parse_args()
    eng = bench_engine(args.database_url)
    url = eng.url.render_as_string(hide_password=False)
    mysql = eng.dialect.name != "postgresql"
    with eng.connect() as c:
        server = c.execute(sa.text("SELECT VERSION()" if mysql else "SHOW server_version")).scalar()
    eng.dispose()
    server = (f"MariaDB {server}" if "mariadb" in server.lower() else f"MySQL {server}") if mysql else f"PostgreSQL {server}"
    out = args.out or str(Path(__file__).parent / "results" / ("bench_triggerer_mysql.json" if mysql else
                                                               "bench_triggerer.json"))
    results = {"server": server, "runs": []}
    for spread in [float(s) for s in args.spread.split(",")]:
        load_before = os.getloadavg()
        r = run(url, args.triggers, args.lead, spread)
        r["load_avg_1_5_15"] = {"before": [round(x, 2) for x in load_before],
                                "after": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
        results["runs"].append(r)
        lat = r["fire_to_queued_ms"] or {}
        late = " (AFTER the first moment: raise --lead)" if r["claimed_after_first_moment"] else ""
        print(f"{r['triggers']:,} triggers over {spread:g} s: {r['resumed']:,} resumed; fire-to-queued p50 "
              f"{lat.get('p50')} ms, p99 {lat.get('p99')} ms, max {lat.get('max')} ms; claimed all in "
              f"{r['claim_all_s']} s{late}; all queued and committed {r['all_queued_visible_ms']} ms after the "
              f"last moment; setup {r['setup_s']} s; RSS {r['rss_mb_holding_all']} MB holding all, peak "
              f"{r['rss_mb_peak']} MB; "
              f"load average (1/5/15 min, {os.cpu_count()} CPUs) before {r['load_avg_1_5_15']['before']}, "
              f"after {r['load_avg_1_5_15']['after']}", flush=True)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(results, indent=2, default=str))
    print(f"results: {out} ({server})")
    return 0


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    sys.exit(handle_errors(main)())
