"""The per-try supervisor without a database: every process a try starts dies when the try
ends (a background job, a double-forking setsid daemon), when the worker's lifeline closes
(the worker died), and on SIGTERM + KILL_NOW from the worker; the exit status is the task's.
Real processes, no systemd. Waits poll a condition with a generous deadline."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine import supervisor
from engine.worker import start_child

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper and /proc: Linux only")

SUPERVISOR = [sys.executable, "-P", str(Path(supervisor.__file__).resolve())]

# A daemon the classic way: fork, setsid, fork again, the middle process exits; the grandchild
# (re-parented away from the task) writes its pid, sleeps, then writes the marker.
DAEMON = r'''
import os, sys, time
pidfile, marker = sys.argv[1], sys.argv[2]
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
with open(pidfile + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(pidfile + ".tmp", pidfile)
time.sleep(30)
with open(marker, "w") as f:
    f.write("x")
'''


def gone(pid: int) -> bool:
    """pid no longer exists, or is a zombie (PID 1 of a container may not reap orphans)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_until(what: str, cond, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def read_pid(path: Path) -> int:
    # (The writer creates the file, then writes: wait for the number, not for the file.)
    wait_until(f"{path.name} to be written", lambda: path.exists() and path.read_text().strip() != "")
    return int(path.read_text())


_started: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _reap_supervisors():
    """A test that fails midway leaves its supervisor running: kill its session and wait for it
    here, so that the next test (on this xdist worker) does not meet its ResourceWarning."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)


@pytest.fixture
def daemon(tmp_path):
    script = tmp_path / "daemon.py"
    script.write_text(DAEMON)
    return f"{sys.executable} {script} {tmp_path / 'daemon.pid'} {tmp_path / 'marker'}"


def supervise(task: dict, tmp_path: Path, lifeline: bool = False):
    """Start `python -P engine/supervisor.py` like the worker does; output in tmp_path/log."""
    spec = {"task": {"env": {"PATH": os.environ["PATH"]}, **task}}
    fds = ()
    write_end = None
    if lifeline:
        read_end, write_end = os.pipe()
        spec["lifeline"], fds = read_end, (read_end,)
    with open(tmp_path / "log", "ab") as out:
        proc = subprocess.Popen(SUPERVISOR, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, pass_fds=fds, cwd=tmp_path)
    _started.append(proc)
    if lifeline:
        os.close(fds[0])
    proc.stdin.write(json.dumps(spec).encode())
    proc.stdin.close()
    return proc, write_end


def bash(command: str) -> dict:
    return {"argv": ["bash", "-c", command]}


@pytest.mark.parametrize("command, status", [("exit 0", 0), ("exit 3", 3), ("exit 99", 99), ("exit 100", 100),
                                             ("kill -TERM $$", -signal.SIGTERM), ("kill -KILL $$", -signal.SIGKILL)])
def test_exit_status_is_the_tasks(tmp_path, command, status):
    proc, _ = supervise(bash(command), tmp_path)
    assert proc.wait(timeout=30) == status


def test_background_process_left_behind_is_killed_when_the_task_ends(tmp_path):
    # (The task ends once its background child runs `sleep`: right after the fork the child is
    # still a `bash`, and the supervisor would name it so.)
    proc, _ = supervise(bash(f"sleep 300 & bg=$!; until [ \"$(cat /proc/$bg/comm)\" = sleep ]; do :; done; "
                             f"echo $bg > {tmp_path}/bg.pid; echo started"), tmp_path)
    assert proc.wait(timeout=30) == 0
    bg = read_pid(tmp_path / "bg.pid")
    assert gone(bg)  # killed before the supervisor exited
    log = (tmp_path / "log").read_text()
    assert "started" in log and "killed 1 process(es) it left running" in log and f"{bg} (sleep)" in log


def test_double_forking_setsid_daemon_is_killed_when_the_task_ends(tmp_path, daemon):
    proc, _ = supervise(bash(f"{daemon}; while [ ! -e {tmp_path}/daemon.pid ]; do sleep 0.02; done"), tmp_path)
    assert proc.wait(timeout=30) == 0
    pid = read_pid(tmp_path / "daemon.pid")
    assert gone(pid) and not (tmp_path / "marker").exists()


def test_closed_lifeline_kills_the_whole_tree(tmp_path, daemon):
    """The worker's death, as the supervisor sees it: EOF on the lifeline (kill -9 included)."""
    grandchild = (f"{sys.executable} -c 'import os,sys,time; open(sys.argv[1],\"w\").write(str(os.getpid())); "
                  f"time.sleep(30); open(sys.argv[2],\"w\").write(\"x\")' {tmp_path}/gc.pid {tmp_path}/gc.marker")
    proc, lifeline = supervise(bash(f"{daemon}; {grandchild} & wait"), tmp_path, lifeline=True)
    gc, d = read_pid(tmp_path / "gc.pid"), read_pid(tmp_path / "daemon.pid")
    assert not gone(gc) and not gone(d)
    os.close(lifeline)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    wait_until("the try's processes to be gone", lambda: gone(gc) and gone(d))
    assert not (tmp_path / "gc.marker").exists() and not (tmp_path / "marker").exists()
    assert "the worker is gone" in (tmp_path / "log").read_text()


def test_sigterm_reaches_every_process_then_kill_now_kills_them(tmp_path, daemon):
    """SIGTERM is forwarded to the whole tree, setsid'd processes included; KILL_NOW (the
    worker's grace is over) kills what ignores it."""
    trap = (f"{sys.executable} -c 'import os,signal,sys,time; os.setsid(); "
            f"signal.signal(signal.SIGTERM, lambda *a: open(sys.argv[1],\"w\").write(\"term\")); "
            f"open(sys.argv[2],\"w\").write(str(os.getpid())); time.sleep(60); time.sleep(60)' "
            f"{tmp_path}/got.term {tmp_path}/trap.pid")
    proc, _ = supervise(bash(f"trap '' TERM; {trap} & wait; wait"), tmp_path)
    pid = read_pid(tmp_path / "trap.pid")
    proc.send_signal(signal.SIGTERM)
    wait_until("the setsid'd process to get SIGTERM", (tmp_path / "got.term").exists)
    assert proc.poll() is None and not gone(pid)  # both ignore it: the grace runs
    proc.send_signal(supervisor.KILL_NOW)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert gone(pid)


def test_python_runner_runs_in_a_forked_child_with_the_tasks_env(tmp_path):
    (tmp_path / "mod.py").write_text("import os, sys\n"
                                     "def f(x):\n    print('hello', x, os.environ.get('ENGINE_TASK_ID'), "
                                     "os.environ.get('SECRET'))\n    sys.exit(7)\n")
    runner = {"callable": "mod:f", "kwargs": {"x": 1}, "dag_folder": str(tmp_path)}
    proc, _ = supervise({"runner": runner, "env": {"ENGINE_TASK_ID": "t"}}, tmp_path)
    assert proc.wait(timeout=60) == 7  # SystemExit inside the task: its code, as an interpreter would
    assert "hello 1 t None" in (tmp_path / "log").read_text()


# The supervisor forwards SIGTERM to a PythonTask child that may not have put back the default
# handlers yet (it is forked with the supervisor's): sent the instant _start returns, it must
# still end the task. Each round in a fresh small interpreter, with the supervisor's handlers.
EARLY_TERM = r"""
import os, signal, sys, time
from engine import supervisor
signal.signal(signal.SIGTERM, lambda *a: None)
signal.signal(supervisor.KILL_NOW, lambda *a: None)
task = {"runner": {"callable": "mod:slow", "dag_folder": sys.argv[1]}, "env": {}}
for _ in range(20):
    pid = supervisor._start(task, (None,))
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + 30
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < end:
        time.sleep(0.01)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        sys.exit("lost: the task ran on after SIGTERM")
    else:
        print(os.waitstatus_to_exitcode(done[1]), flush=True)
"""


def test_sigterm_the_instant_a_python_task_is_forked_ends_it(tmp_path):
    (tmp_path / "mod.py").write_text("import time\ndef slow():\n    time.sleep(300)\n")
    root = str(Path(supervisor.__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", EARLY_TERM, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr  # none lost to the inherited handler
    assert out.stdout.split() == [str(-signal.SIGTERM)] * 20  # each ended by it


def test_start_child_runs_the_try_under_a_supervisor(tmp_path):
    row = {"ti_id": 1, "dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "try_number": 1,
           "kind": "bash", "bash_command": f"sleep 300 & echo $! > {tmp_path}/bg.pid; echo $PPID > {tmp_path}/sup.pid",
           "env": None, "map_args": None, "fileloc": str(tmp_path / "dag.py"),
           "log_path": str(tmp_path / "logs" / "attempt=1.log"), "conf": {}}
    proc = start_child(row)
    try:
        assert proc.wait(timeout=60) == 0
    finally:
        proc.lifeline.close()
    assert read_pid(tmp_path / "sup.pid") == proc.pid  # bash's parent is the supervisor
    assert gone(read_pid(tmp_path / "bg.pid"))


def test_descendants_follow_the_parent_chain():
    table = {10: (1, "S"), 11: (10, "S"), 12: (11, "Z"), 13: (12, "S"), 20: (1, "S")}
    assert sorted(supervisor.descendants(10, table)) == [11, 13]  # zombies are not listed, their children are
    assert supervisor.descendants(20, table) == []
    assert supervisor.process_table()[os.getpid()][0] == os.getppid()
