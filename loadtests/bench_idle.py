"""What an idle deployment costs: CPU and statements per second of one `engine scheduler`, one
`engine worker` and one `engine triggerer` with nothing to do, and the wall time of
`engine tick` (what cron runs) on it.

    python loadtests/bench_idle.py [--dialect postgresql|mysql] [--database-url URL] [--seconds 30]

A fresh database (`bench_idle` on the local server of the dialect unless --database-url names
one: that database is DROPPED and re-created) with one DAG synced and nothing triggered. The
services run with default settings; once each has sent a statement and 5 s more (warm-up), for
--seconds:

  * CPU: user + system time of each service and its descendants (the worker's zygote), from
    /proc, as a share of one core;
  * statements: every command each service sends to the server, counted in the process at
    the driver (so also what engine.lite sends, which SQLAlchemy never sees): BEGIN, each
    statement, COMMIT/ROLLBACK, and the pool's pre-ping; neither server keeps per-database
    statement counts without an extension.

Then `engine tick` runs --ticks times (wall time of the whole process, imports included:
median and max). The machine's load average is printed beside the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_latency import fresh_database, load  # noqa: E402

DEFAULT_URLS = {"postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/bench_idle",
                "mysql": "mysql+pymysql://root@127.0.0.1:3306/bench_idle"}

# Runs a service with a statement counter at the driver, below SQLAlchemy and engine.lite (the
# scheduler's light engine talks to the driver directly: counted through SQLAlchemy's events
# alone, its statements were missed): every command sent to the server. PyMySQL: each COM_QUERY
# (statements, COMMIT, ROLLBACK, session set-up) and COM_PING (the pool's pre-ping). psycopg:
# each cursor execute() (statements, the pre-ping's SELECT 1) and each internal command (BEGIN,
# COMMIT, ROLLBACK). The counts are written to a file every 0.5 s by a daemon thread.
COUNTED = """
import json, sys, threading, time
counts = {"statements": 0}
def counting(fn, when=lambda *a, **k: True):
    def wrapper(*a, **k):
        if when(*a, **k):
            counts["statements"] += 1
        return fn(*a, **k)
    return wrapper
try:
    import pymysql.connections
    from pymysql.constants import COMMAND
    C = pymysql.connections.Connection
    C._execute_command = counting(C._execute_command,
                                  lambda self, command, sql: command in (COMMAND.COM_QUERY, COMMAND.COM_PING))
except ImportError:
    pass
try:
    import psycopg, psycopg._connection_base
    B = psycopg._connection_base.BaseConnection
    B._exec_command = counting(B._exec_command)
    psycopg.Cursor.execute = counting(psycopg.Cursor.execute)
    psycopg.Cursor.executemany = counting(psycopg.Cursor.executemany)
except ImportError:
    pass
def dump(path=sys.argv.pop(1)):
    while True:
        with open(path + ".tmp", "w") as f:
            json.dump(counts, f)
        import os
        os.replace(path + ".tmp", path)
        time.sleep(0.5)
threading.Thread(target=dump, daemon=True).start()
from cli.main import main
sys.argv[0] = "engine"
main()
"""


def cpu_seconds(pid: int) -> float:
    """utime + stime of pid and every live descendant (clock ticks -> seconds)."""
    tick = os.sysconf("SC_CLK_TCK")
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                data = Path(f"/proc/{name}/stat").read_bytes()
                f = data[data.rindex(b")") + 2:].split()
                table[int(name)] = (int(f[1]), int(f[11]) + int(f[12]))
            except (OSError, ValueError, IndexError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += table.get(p, (0, 0))[1]
        todo.extend(c for c, (pp, _) in table.items() if pp == p)
    return total / tick


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dialect", choices=sorted(DEFAULT_URLS), default="postgresql")
    ap.add_argument("--database-url")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--ticks", type=int, default=5)
    args = ap.parse_args()
    url = args.database_url or DEFAULT_URLS[args.dialect]
    fresh_database(url)
    tmp = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    env = {**os.environ, "ENGINE_DATABASE_URL": url, "ENGINE_HOME": str(tmp), "ENGINE_DAGS_FOLDER": str(tmp / "dags"),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    engine_bin = shutil.which("engine", path=str(Path(sys.executable).parent)) or "engine"
    subprocess.run([engine_bin, "db", "upgrade"], env=env, cwd=ROOT, check=True, capture_output=True)
    dags = tmp / "dags"
    dags.mkdir()
    (dags / "idle.py").write_text('from engine import DAG, BashTask\n'
                                  'with DAG("idle", schedule=None):\n'
                                  '    BashTask("t", bash_command="true")\n')
    subprocess.run([engine_bin, "dags", "sync", str(dags)], env=env, cwd=ROOT, check=True, capture_output=True)
    services = {}
    try:
        for name in ("scheduler", "worker", "triggerer"):
            out = open(tmp / f"{name}.log", "ab")
            # (cwd: `python -c` puts the working directory first on sys.path, ahead of PYTHONPATH:
            # from another checkout, that checkout's code would run)
            services[name] = subprocess.Popen([sys.executable, "-c", COUNTED, str(tmp / f"{name}.count"), name],
                                              env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        # Warm-up: every service has started (imported, connected, sent a statement; tens of
        # seconds on a loaded machine), then 5 s more.
        end = time.monotonic() + 180
        while time.monotonic() < end and not all(
                (tmp / f"{n}.count").exists() and json.loads((tmp / f"{n}.count").read_text())["statements"] > 0
                for n in services):
            time.sleep(0.5)
        time.sleep(5)

        def sample():
            return {n: (cpu_seconds(p.pid), json.loads((tmp / f"{n}.count").read_text())["statements"])
                    for n, p in services.items()}
        t0, s0 = time.monotonic(), sample()
        time.sleep(args.seconds)
        t1, s1 = time.monotonic(), sample()
        for n, p in services.items():
            if p.poll() is not None:
                raise SystemExit(f"{n} exited: {(tmp / f'{n}.log').read_text()[-2000:]}")
        span = t1 - t0
        dialect = "mysql" if url.startswith("mysql") else "postgresql"
        print(f"bench_idle on {dialect}: idle scheduler + worker + triggerer for {span:.0f} s; {load()}")
        cpu_total = stmt_total = 0.0
        for n in services:
            cpu = (s1[n][0] - s0[n][0]) / span * 100
            stmts = (s1[n][1] - s0[n][1]) / span
            cpu_total, stmt_total = cpu_total + cpu, stmt_total + stmts
            print(f"  {n:10} CPU {cpu:5.2f} % of a core   statements {stmts:6.2f}/s")
        print(f"  {'total':10} CPU {cpu_total:5.2f} % of a core   statements {stmt_total:6.2f}/s")
        walls = []
        for _ in range(args.ticks):
            t = time.perf_counter()
            subprocess.run([engine_bin, "tick"], env=env, cwd=ROOT, check=True, capture_output=True)
            walls.append((time.perf_counter() - t) * 1000)
        print(f"  engine tick wall: median {statistics.median(walls):.0f} ms  max {max(walls):.0f} ms "
              f"(n={len(walls)}); {load()}")
    finally:
        for p in services.values():
            p.terminate()
        for p in services.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
