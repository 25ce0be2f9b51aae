"""Worker and runner tests that need no database: the runner subprocess, child processes,
timeouts and process-group kills, and run_once/stop against an in-memory fake of the named queries."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine import db, worker as worker_mod
from engine.errors import EngineError
from engine.worker import Worker, build_command, start_child

TASKS = '''
import os
from engine.exceptions import SkipTask
from helper import double

def ok(path, x, y=0):
    with open(path, "w") as f:
        f.write(f"{double(x) + y} {os.getcwd()} {os.environ.get('ENGINE_TASK_ID')}")
    return {"x": x}

def skip():
    raise SkipTask("nothing to do")

def boom():
    raise ValueError("kaboom")
'''


@pytest.fixture
def dag_dir(tmp_path):
    d = tmp_path / "dags"
    d.mkdir()
    (d / "tasks.py").write_text(TASKS)
    (d / "helper.py").write_text("def double(x):\n    return 2 * x\n")
    (d / "pipeline.py").write_text("# the DAG file\n")
    return d


def run_runner(spec, cwd):
    return subprocess.run([sys.executable, "-m", "engine.runner"], input=json.dumps(spec), cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def finish_child(proc, timeout=60):
    """Wait for a try started with start_child, then close its lifeline as the worker does."""
    try:
        return proc.wait(timeout=timeout)
    finally:
        proc.lifeline.close()


def make_row(tmp_path, dag_dir, n=1, **kw):
    row = {"ti_id": n, "dag_id": "d", "run_id": "manual__1", "task_id": f"t{n}", "map_index": -1, "try_number": 1,
           "kind": "bash", "bash_command": "echo hi", "env": None, "python_callable": None, "op_kwargs": None,
           "map_args": None, "execution_timeout": None, "fileloc": str(dag_dir / "pipeline.py"),
           "log_path": str(tmp_path / "logs" / f"t{n}" / "attempt=1.log"), "conf": {"a": 1}}
    row.update(kw)
    return row


# ---- the runner -------------------------------------------------------------------------------------

def test_runner_imports_from_dag_folder_and_passes_kwargs(dag_dir, tmp_path):
    out = tmp_path / "out.txt"
    res = run_runner({"callable": "tasks:ok", "kwargs": {"path": str(out), "x": 3, "y": 1},
                      "dag_folder": str(dag_dir)}, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert out.read_text().split()[0] == "7"
    assert "Returned value was: {'x': 3}" in res.stdout


def test_runner_skip_task_exits_99(dag_dir, tmp_path):
    res = run_runner({"callable": "tasks:skip", "kwargs": {}, "dag_folder": str(dag_dir)}, cwd=tmp_path)
    assert res.returncode == 99
    assert "nothing to do" in res.stderr


@pytest.mark.parametrize("ref, needle", [("tasks:boom", "ValueError: kaboom"),
                                         ("missing_module:f", "ModuleNotFoundError"),
                                         ("tasks:nope", "AttributeError")])
def test_runner_exception_exits_1_with_traceback(dag_dir, tmp_path, ref, needle):
    res = run_runner({"callable": ref, "kwargs": {}, "dag_folder": str(dag_dir)}, cwd=tmp_path)
    assert res.returncode == 1
    assert "Traceback" in res.stderr and needle in res.stderr


# ---- commands and child processes -----------------------------------------------------------------

def test_build_command_bash_map_args_override(tmp_path, dag_dir):
    row = make_row(tmp_path, dag_dir, env={"A": "1", "B": "2"},
                   map_args={"bash_command": "echo mapped", "env": {"B": "3"}})
    task, what = build_command(row)
    env = task["env"]
    assert task["argv"] == ["bash", "-c", "echo mapped"] and "runner" not in task and "echo mapped" in what
    assert (env["A"], env["B"], env["ENGINE_CONF"]) == ("1", "3", '{"a": 1}')
    assert env["PATH"] == os.environ["PATH"]


def test_build_command_python_merges_kwargs(tmp_path, dag_dir):
    row = make_row(tmp_path, dag_dir, kind="python", bash_command=None, python_callable="tasks:ok",
                   op_kwargs={"x": 1, "y": 2}, map_args={"x": 5}, map_index=0)
    task, _ = build_command(row)
    assert "argv" not in task  # the supervisor runs the runner in a forked child
    assert task["runner"] == {"callable": "tasks:ok", "kwargs": {"x": 5, "y": 2}, "dag_folder": str(dag_dir),
                              "where": "task d.t1[0]"}
    assert task["env"]["ENGINE_MAP_INDEX"] == "0"


def test_start_child_logs_env_cwd_and_own_session(tmp_path, dag_dir):
    cmd = 'echo "$ENGINE_DAG_ID $ENGINE_TASK_ID $ENGINE_RUN_ID $ENGINE_MAP_INDEX $ENGINE_TRY_NUMBER $X"; pwd; echo err >&2'
    row = make_row(tmp_path, dag_dir, bash_command=cmd, env={"X": "ex"})
    proc = start_child(row)
    assert os.getsid(proc.pid) == proc.pid  # the supervisor leads its own session
    assert finish_child(proc) == 0
    lines = Path(row["log_path"]).read_text().splitlines()
    assert "try 1 of d.t1" in lines[0] and "bash -c" in lines[0]
    assert lines[1:] == ["d t1 manual__1 -1 1 ex", str(dag_dir), "err"]
    finish_child(start_child(row))  # a second start appends
    assert len(Path(row["log_path"]).read_text().splitlines()) == 8


def test_start_child_python_task(tmp_path, dag_dir):
    out = tmp_path / "out.txt"
    row = make_row(tmp_path, dag_dir, kind="python", python_callable="tasks:ok",
                   op_kwargs={"path": str(out)}, map_args={"x": 4})
    assert finish_child(start_child(row)) == 0
    assert out.read_text() == f"8 {dag_dir} t1"


# ---- run_once / stop against a fake database ------------------------------------------------------

class FakeDB:
    """Stands in for db.connect/db.run: serves claim rows, records finish_ti calls (finish_tis: one
    record per try), can be 'down'."""

    def __init__(self):
        self.queue, self.finished, self.released, self.down, self.alive, self.pending = [], [], [], False, True, 0

    @contextmanager
    def connect(self, eng, **kw):
        if self.down:
            raise EngineError("database is unreachable (fake)")
        yield None

    def run(self, conn, name, **p):
        if name == "claim_tis":
            rows, self.queue = self.queue[:p["limit"]], self.queue[p["limit"]:]
            return [SimpleNamespace(_mapping=r) for r in rows]
        if name == "worker_heartbeat":
            return SimpleNamespace(all=lambda: [SimpleNamespace(ti_id=None, try_number=None, reason=None,
                                                                state="alive" if self.alive else "dead")])
        value = {"register_job": 42, "heartbeat": self.alive, "finish_job": None, "pending_work": self.pending}.get(name)
        if name == "finish_ti":
            self.finished.append(p)
            value = "success" if p["exit_code"] == 0 and not p["timed_out"] else "failed"
        if name == "finish_tis":  # several tries in one call: recorded as finish_ti calls, one per try
            keys = ("ti_id", "try_number", "exit_code", "timed_out", "reason", "result")
            tries = [dict(zip(keys, t)) for t in zip(*(p[k + "s"] for k in keys))]
            self.finished.extend({**t, "now": p["now"], "batched": True} for t in tries)
            return SimpleNamespace(all=lambda: [SimpleNamespace(
                ti_id=t["ti_id"], try_number=t["try_number"],
                state="success" if t["exit_code"] == 0 and not t["timed_out"] else "failed") for t in tries])
        if name == "release_ti":
            self.released.append(p)
            value = "scheduled"
        return SimpleNamespace(scalar_one=lambda: value)


@pytest.fixture
def fake(monkeypatch):
    f = FakeDB()
    monkeypatch.setattr(db, "connect", f.connect)
    monkeypatch.setattr(db, "run", f.run)
    return f


def make_worker(tmp_path, **kw):
    cfg = SimpleNamespace(worker_queues="default, other", worker_concurrency=2, worker_poll_interval=0.01,
                          heartbeat_interval=0.0, job_heartbeat_threshold=60.0, worker_shutdown_timeout=30.0,
                          log_path=tmp_path / "logs", dags_path=tmp_path / "dags")
    return Worker(eng=None, cfg=cfg, **kw)


def run_until(w, cond, limit=30.0):
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, "timed out"
        w.run_once()
        time.sleep(0.02)


def test_worker_defaults_from_config(tmp_path):
    w = make_worker(tmp_path)
    assert (w.queues, w.concurrency) == (["default", "other"], 2)
    assert make_worker(tmp_path, queues=["q"], concurrency=5).queues == ["q"]


def test_run_once_claims_up_to_concurrency_and_reports(fake, tmp_path, dag_dir):
    fake.queue = [make_row(tmp_path, dag_dir, n, bash_command=f"exit {n - 1}") for n in (1, 2, 3)]
    w = make_worker(tmp_path)
    w.start()
    counts = w.run_once()
    assert (counts["claimed"], counts["running"]) == (2, 2)
    run_until(w, lambda: len(fake.finished) == 3)
    assert sorted((f["ti_id"], f["exit_code"], f["timed_out"]) for f in fake.finished) == \
        [(1, 0, False), (2, 1, False), (3, 2, False)]
    assert w.run_once() == {"claimed": 0, "finished": 0, "running": 0}


def test_tries_that_ended_together_are_reported_in_one_finish_tis_call(fake, tmp_path, dag_dir):
    fake.queue = [make_row(tmp_path, dag_dir, n, bash_command=f"exit {n - 1}") for n in (1, 2, 3)]
    w = make_worker(tmp_path, concurrency=3)
    w.start()
    assert w.run_once()["claimed"] == 3
    for c in w.children:  # all three end before the worker looks
        c.proc.wait(timeout=30)
    w.run_once()
    assert sorted((f["ti_id"], f["exit_code"], f.get("batched")) for f in fake.finished) == \
        [(1, 0, True), (2, 1, True), (3, 2, True)]
    assert not w.unreported


def test_outcome_kept_while_database_down(fake, tmp_path, dag_dir, caplog):
    fake.queue = [make_row(tmp_path, dag_dir)]
    w = make_worker(tmp_path)
    w.start()
    w.run_once()
    w.children[0].proc.wait(timeout=30)
    fake.down = True
    for _ in range(3):
        assert w.run_once()["finished"] in (0, 1)
    assert fake.finished == [] and len(w.unreported) == 1
    assert sum("unreachable" in r.getMessage() for r in caplog.records) == 1  # logged once
    fake.down = False
    run_until(w, lambda: not w.unreported, limit=5)  # after the backoff delay
    assert sum("reachable again" in r.getMessage() for r in caplog.records) == 1
    assert [(f["ti_id"], f["exit_code"]) for f in fake.finished] == [(1, 0)] and not w.unreported


def test_start_failure_reported_as_127(fake, tmp_path, dag_dir):
    (tmp_path / "blocker").write_text("a file, not a folder")
    fake.queue = [make_row(tmp_path, dag_dir, log_path=str(tmp_path / "blocker" / "x.log"))]
    w = make_worker(tmp_path)
    w.start()
    w.run_once()
    assert fake.finished[0]["exit_code"] == 127 and "could not start" in fake.finished[0]["reason"]


def time_out_once(w, fake, ready: Path) -> None:
    """Run the worker's one try until it has written `ready`, then let its execution_timeout
    (set long, so a slow start never times it out early) expire at once; run until reported."""
    run_until(w, lambda: ready.exists() or fake.finished)
    w.children[0].deadline = time.monotonic()
    run_until(w, lambda: fake.finished)


def test_timeout_kills_process_group(fake, tmp_path, dag_dir):
    pidfile = tmp_path / "bg.pid"
    fake.queue = [make_row(tmp_path, dag_dir, execution_timeout=600,
                           bash_command=f"sleep 60 & echo $! > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; wait")]
    w = make_worker(tmp_path)
    w.start()
    time_out_once(w, fake, pidfile)
    assert fake.finished[0]["timed_out"] is True and fake.finished[0]["exit_code"] == -signal.SIGTERM
    bg = int(pidfile.read_text())
    time.sleep(0.2)
    assert gone(bg), "the background process of the timed-out task survived"


def gone(pid):
    """True if pid no longer exists or is a zombie (PID 1 of a container may not reap orphans)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_timeout_escalates_to_sigkill(fake, tmp_path, dag_dir, monkeypatch):
    monkeypatch.setattr(worker_mod, "KILL_GRACE", 0.3)
    ready = tmp_path / "ready"
    fake.queue = [make_row(tmp_path, dag_dir, execution_timeout=600,
                           bash_command=f"trap '' TERM; touch {ready}; while true; do sleep 0.1; done")]
    w = make_worker(tmp_path)
    w.start()
    time_out_once(w, fake, ready)
    assert (fake.finished[0]["timed_out"], fake.finished[0]["exit_code"]) == (True, -signal.SIGKILL)


def test_stop_kills_and_keeps_outcome_when_db_down(fake, tmp_path, dag_dir, monkeypatch):
    monkeypatch.setattr(worker_mod, "KILL_GRACE", 0.3)
    fake.queue = [make_row(tmp_path, dag_dir, bash_command="sleep 60")]
    w = make_worker(tmp_path)
    w.start()
    w.run_once()
    fake.down = True
    w.stop(timeout=0.2)
    assert not w.children and len(w.unreported) == 1
    o = w.unreported[0]
    assert (o.exit_code, o.timed_out, o.reason, o.release) == (-signal.SIGTERM, False, "worker shut down", True)


def test_stop_waits_then_hands_back_what_still_runs(fake, tmp_path, dag_dir, monkeypatch):
    monkeypatch.setattr(worker_mod, "KILL_GRACE", 0.3)
    fake.queue = [make_row(tmp_path, dag_dir, 1, bash_command="sleep 0.2"),
                  make_row(tmp_path, dag_dir, 2, bash_command="sleep 60")]
    w = make_worker(tmp_path)
    w.start()
    w.run_once()
    w.children[0].proc.wait(timeout=60)  # the short try is over (however slowly it started) ...
    w.stop(timeout=1.5)  # ... so the stop finds it finished and reports it; the long one is handed back
    assert [(f["ti_id"], f["exit_code"]) for f in fake.finished] == [(1, 0)]  # finished in time: reported
    assert [(r["ti_id"], r["try_number"], r["reason"]) for r in fake.released] == [(2, 1, "worker shut down")]
    assert not w.children and not w.unreported


def test_outage_backoff_is_capped_and_logged_once(caplog):
    import logging
    o = db.Outage(logging.getLogger("t"), first=0.5, cap=4.0)
    delays = [o.failed("x", EngineError("down")) for _ in range(6)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0] and not o.due()
    o.ok()
    o.ok()
    assert o.due() and o.delay == 0.5
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("unreachable" in m for m in msgs) == 1 and sum("reachable again" in m for m in msgs) == 1


def test_declared_dead_kills_children_and_raises(fake, tmp_path, dag_dir):
    fake.queue = [make_row(tmp_path, dag_dir, bash_command="sleep 60")]
    w = make_worker(tmp_path)
    w.start()
    w.run_once()
    proc = w.children[0].proc
    fake.alive = False
    with pytest.raises(EngineError, match="declared dead"):
        w.run_once()
    assert proc.poll() is not None and not w.children


def test_loop_burst_returns_when_no_work(fake, tmp_path, dag_dir):
    fake.queue = [make_row(tmp_path, dag_dir, n) for n in (1, 2, 3)]
    w = make_worker(tmp_path)
    w.loop(burst=True)
    assert len(fake.finished) == 3 and not w.children


def test_timeout_kills_a_grandchild_that_left_the_process_group(fake, tmp_path, dag_dir):
    """setsid'd processes escape a process-group kill; the try's supervisor kills them anyway."""
    pidfile = tmp_path / "escaped.pid"
    escape = f"{sys.executable} -c 'import os,time; os.setsid(); open(\"{pidfile}.tmp\",\"w\").write(str(os.getpid())); " \
             f"os.rename(\"{pidfile}.tmp\", \"{pidfile}\"); time.sleep(60)'"
    fake.queue = [make_row(tmp_path, dag_dir, execution_timeout=600, bash_command=f"{escape} & wait")]
    w = make_worker(tmp_path)
    w.start()
    time_out_once(w, fake, pidfile)
    assert fake.finished[0]["timed_out"] is True
    assert gone(int(pidfile.read_text())), "the setsid'd grandchild of the timed-out task survived"


def test_task_env_drops_engine_settings_and_anything_holding_the_credentials(tmp_path, dag_dir):
    from engine.worker import engine_secrets, task_base_env

    url = "postgresql+psycopg://engine:s3cr%40t@db.example/engine"
    cfg = SimpleNamespace(database_url=url)
    secrets = engine_secrets(cfg)
    assert {url, "s3cr@t", "s3cr%40t"} <= set(secrets)
    environ = {"ENGINE_DATABASE_URL": url, "ENGINE_HOME": "/var/lib/engine", "PGPASSWORD": "s3cr@t",
               "APP_DSN": f"dsn={url}", "QUOTED": "x:s3cr%40t@y", "PATH": "/usr/bin", "HOME": "/home/e"}
    assert task_base_env(environ, secrets) == {"PATH": "/usr/bin", "HOME": "/home/e"}
    assert task_base_env(environ, secrets, passthrough=True) == environ
    row = make_row(tmp_path, dag_dir, env={"MINE": "1"})
    task, _ = build_command(row, base=task_base_env(environ, secrets))
    assert set(task["env"]) == {"PATH", "HOME", "MINE", "ENGINE_DAG_ID", "ENGINE_TASK_ID", "ENGINE_RUN_ID",
                                "ENGINE_MAP_INDEX", "ENGINE_TRY_NUMBER", "ENGINE_CONF"}
    with pytest.raises(ValueError, match="NUL"):
        build_command(make_row(tmp_path, dag_dir, env={"BAD": "a\x00b"}))
