"""`engine worker` as a real, detached process (its own session, as under nohup; no systemd)
against the test database (both dialects): a try's processes never outlive it.

- kill -9 of the worker: the task's grandchild dies with it and never writes its marker;
- kill -9 of a try's supervisor: the worker (a child subreaper) kills the orphaned processes,
  fails that try and goes on;
- what a task can reach: no ENGINE_* settings and no database URL, unless
  task_env_passthrough says so.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.dagsync import sync
from tests.cluster import FAST, REPO
from tests.helpers import sql, tick, trigger

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper and /proc: Linux only")

# The grandchild: writes its pid, sleeps far longer than any wait here, then writes the marker.
GRANDCHILD = '''
import os, sys, time
marker, pidfile = sys.argv[1], sys.argv[2]
with open(pidfile + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(pidfile + ".tmp", pidfile)
time.sleep(120)
with open(marker, "w") as f:
    f.write("x")
'''

DAG = '''
from engine import DAG, BashTask

with DAG("family", max_active_tasks=None):
    BashTask("t", bash_command={command!r})
'''


def gone(pid: int) -> bool:
    """pid no longer exists, or is a zombie (PID 1 of a container may not reap orphans)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_until(what: str, cond, timeout: float, log: Path | None = None) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            text = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            raise AssertionError(f"timed out waiting for {what}\n{text}")
        time.sleep(0.05)


def start_worker(db_url: str, workdir: Path, *args: str, **env: str) -> tuple[subprocess.Popen, Path]:
    """`engine worker` detached like nohup: its own session, output to a file."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"worker-{time.monotonic_ns()}.log"
    full = {**os.environ, **FAST, "ENGINE_DATABASE_URL": db_url, "ENGINE_HOME": str(workdir / "home"),
            "PYTHONPATH": str(REPO), **env}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", "-v", "worker", *args], cwd=workdir, env=full,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, log


def family(eng, cfg, tmp_path) -> dict:
    """DAG "family": a BashTask whose bash starts a grandchild and waits for it; queued."""
    dags = tmp_path / "dags"
    dags.mkdir()
    script = tmp_path / "grandchild.py"  # not in the DAG folder: `dags sync` imports every file there
    script.write_text(GRANDCHILD)
    files = {name: tmp_path / name for name in ("marker", "gc.pid", "sup.pid")}
    command = (f"echo $PPID > {files['sup.pid']}; "
               f"bash -c '{sys.executable} {script} {files['marker']} {files['gc.pid']} & wait'")
    (dags / "family.py").write_text(DAG.format(command=command))
    sync(eng, dags)
    trigger(eng, "family")
    tick(eng, cfg)
    return files


def pid_in(path: Path, log: Path) -> int:
    wait_until(f"{path.name} to be written", path.exists, 60, log)
    return int(path.read_text())


def kill_if_alive(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def test_kill_9_of_the_worker_kills_the_tasks_grandchild(eng, cfg, db_url, tmp_path):
    files = family(eng, cfg, tmp_path)
    worker, log = start_worker(db_url, tmp_path / "w")
    gc = None
    try:
        gc = pid_in(files["gc.pid"], log)
        assert not gone(gc)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        wait_until("the grandchild to die with the worker", lambda: gone(gc), 60, log)
        assert not files["marker"].exists()  # and it never will: its writer is dead
    finally:
        kill_if_alive(worker.pid, *([gc] if gc else []))
        worker.wait(timeout=30)


def test_kill_9_of_a_supervisor_the_worker_kills_its_orphans_and_goes_on(eng, cfg, db_url, tmp_path):
    files = family(eng, cfg, tmp_path)
    worker, log = start_worker(db_url, tmp_path / "w")
    gc = sup = None
    try:
        gc, sup = pid_in(files["gc.pid"], log), pid_in(files["sup.pid"], log)
        assert sup != worker.pid  # bash's parent is the try's supervisor, not the worker
        os.kill(sup, signal.SIGKILL)
        wait_until("the grandchild to be killed by the worker", lambda: gone(gc), 60, log)
        wait_until("the try to be reported", lambda: sql(eng, "SELECT state FROM task_instance")[0][0] == "failed",
                   60, log)
        assert worker.poll() is None and not files["marker"].exists()
        assert "left by a killed supervisor" in log.read_text()
        (job_state,) = sql(eng, "SELECT state FROM job WHERE pid = :p", p=worker.pid)[0]
        assert job_state == "running"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    finally:
        kill_if_alive(worker.pid, *[p for p in (gc, sup) if p])
        worker.wait(timeout=30)


ENV_DAG = '''
from engine import DAG, BashTask

with DAG("envdump", max_active_tasks=None):
    BashTask("dump", bash_command='env > {out}/"$ENGINE_RUN_ID".env')
'''


def test_a_task_sees_no_engine_settings_nor_the_database_url_unless_passthrough(eng, cfg, db_url, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "envdump.py").write_text(ENV_DAG.format(out=out))
    sync(eng, dags)

    def run(run_id: str, **env: str) -> dict:
        trigger(eng, "envdump", run_id)
        tick(eng, cfg)
        worker, log = start_worker(db_url, tmp_path / "w", "--burst", DSN_COPY=f"dsn={db_url}", KEEP_ME="yes",
                                   **env)
        assert worker.wait(timeout=120) == 0, log.read_text()
        lines = (out / f"{run_id}.env").read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line)

    plain = run("plain")
    assert "ENGINE_DATABASE_URL" not in plain and "ENGINE_HOME" not in plain and "DSN_COPY" not in plain
    assert not any(db_url in v for v in plain.values())
    assert plain["KEEP_ME"] == "yes" and plain["ENGINE_DAG_ID"] == "envdump" and plain["ENGINE_RUN_ID"] == "plain"
    full = run("full", ENGINE_TASK_ENV_PASSTHROUGH="true")
    assert full["ENGINE_DATABASE_URL"] == db_url and full["DSN_COPY"] == f"dsn={db_url}"
