"""The per-try supervisor: every process a try starts dies when the try ends, and when the
worker dies, whatever supervises the worker (systemd, nohup, a shell, docker).

The worker starts one supervisor per try (`python -P engine/supervisor.py`, the spec as JSON on
stdin, stdout and stderr appended to the task log). `supervise()` then:

- becomes a session leader (setsid) and, on Linux, a child subreaper
  (prctl PR_SET_CHILD_SUBREAPER): every orphaned descendant of the try (double forks, setsid'd
  daemons, `cmd &` left behind by bash) is re-parented to the supervisor instead of to init;
- starts the task: `bash -c ...` (any argv) through posix_spawn (a vfork and exec: no copy
  of the supervisor's page tables, a fraction of what fork + exec costs), or the PythonTask
  runner (engine.runner.run) in a forked child;
- waits for the task's main process. When it ends, every remaining descendant is killed
  (SIGKILL; /proc is walked for every process whose parent chain leads here, repeatedly,
  until the supervisor has no child left), and the supervisor exits with the task's status:
  the same code, or killed by the same signal, so the worker's protocol (0, 99 skip, 100
  defer, -N signal) is unchanged;
- watches its lifeline, the read end of a pipe whose write end only the worker holds: EOF
  means the worker is gone (kill -9, OOM, crash; unlike PR_SET_PDEATHSIG it does not fire
  when the thread that started us exits): the whole tree is killed at once and the
  supervisor exits;
- on SIGTERM from the worker (execution_timeout, shutdown) forwards SIGTERM to every process
  of the tree; on KILL_NOW (SIGUSR1, sent by the worker when its grace period is over) kills
  the tree with SIGKILL. (A PythonTask child forked a moment before gets it too: the handled
  signals stay blocked across the fork until the child has put back the default handlers.)

A try is therefore never retried while processes of the old try run: when the worker dies the
tree is gone within milliseconds, and reset_orphans_v1 retries the try only after the
worker's heartbeat is job_heartbeat_threshold old. What this cannot cover: a kill -9 of the
worker AND of the supervisor at the same moment leaves the tree to init; a cgroup covers that
(systemd kills what is left in the unit's cgroup: deploy/systemd/engine-worker@.service).
Elsewhere than Linux (no subreaper, no /proc) the task runs in its own process group, which
the supervisor signals instead; processes that leave the group escape (docs/operations.md).

supervise() is a plain function: it may be called in a child forked from a warm, pre-imported
parent instead of a fresh interpreter. It needs nothing but the standard library (this file
is run by path, so starting it imports no engine module); the PythonTask runner is imported in
the forked task child.
"""
from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import traceback
from pathlib import Path

KILL_NOW = signal.SIGUSR1            # from the worker: SIGKILL the whole tree now
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
POLL = 1.0                           # seconds between checks when no signal wakes us


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def set_subreaper(on: bool = True) -> bool:
    """Make this process a child subreaper (Linux); False where that is not possible."""
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


def is_subreaper() -> bool:
    prctl = _prctl()
    if prctl is None:
        return False
    import ctypes

    value = ctypes.c_int(0)
    return prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) == 0 and value.value != 0


def process_table() -> dict[int, tuple[int, str]] | None:
    """pid -> (parent pid, state letter) of every process, from /proc; None without /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    table = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
            fields = data[data.rindex(b")") + 2:].split()  # the command name may hold spaces and ')'
            table[int(name)] = (int(fields[1]), fields[0].decode())
        except (OSError, ValueError, IndexError):
            continue  # it just exited
    return table or None


def descendants(root: int, table: dict | None = None) -> list[int]:
    """Processes (zombies excepted) whose parent chain leads to root."""
    table = process_table() if table is None else table
    if not table:
        return []
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    found, todo = [], list(kids.get(root, ()))
    while todo:
        pid = todo.pop()
        if table[pid][1] not in ("Z", "X"):
            found.append(pid)
        todo.extend(kids.get(pid, ()))
    return found


def signal_pids(pids, sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def note(text: str) -> None:
    """One line of the supervisor's own in the task log (its stderr)."""
    try:
        sys.stderr.write(f"engine supervisor: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class _Tree:
    """The task's main process and everything below the supervisor."""

    def __init__(self, pid: int):
        self.pid = pid                # the task's main process; also its process group
        self.status: int | None = None
        self.proc = os.path.exists("/proc/self/stat")   # /proc to walk (process_table())

    def signal(self, sig: int) -> list[int]:
        """Send sig to every live descendant (or, without /proc, to the task's process group)."""
        if not self.proc:
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            return []
        pids = descendants(os.getpid())
        signal_pids(pids, sig)
        return pids

    def reap(self) -> bool:
        """Collect every child that ended (orphans re-parented here included); False when no
        child is left at all."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.pid:
                self.status = os.waitstatus_to_exitcode(status)

    def kill_all(self) -> list[str]:
        """SIGKILL every descendant, again and again, until the supervisor has no child left
        (as a subreaper every descendant ends up its child). Returns "pid (command)" of each
        process killed."""
        killed: dict[int, str] = {}
        delay = 0.001
        if not self.reap():
            # No child left, not even a zombie: then no descendant is left either (an orphan of
            # a descendant is re-parented to us, the subreaper, before its parent can be
            # reaped), and the /proc walk below is not needed (the common case: a task that
            # started nothing in the background).
            return []
        while True:
            if self.proc:
                pids = descendants(os.getpid())
                killed.update((p, _name(p)) for p in pids if p not in killed)
                signal_pids(pids, signal.SIGKILL)
            else:
                self.signal(signal.SIGKILL)
            if not self.reap():
                return list(killed.values())
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _exit_code(code) -> int:
    """What the interpreter would exit with after SystemExit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run_python(spec: dict, env: dict) -> int:
    """In the forked task child: the PythonTask runner, as `python -m engine.runner` would."""
    import atexit
    import io
    import threading

    atexit._clear()  # only the task's own exit handlers run at its end, never a parent's
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = open(os.devnull)
    for fd, name in ((1, "stdout"), (2, "stderr")):  # unbuffered, like PYTHONUNBUFFERED
        setattr(sys, name, io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                                            errors="backslashreplace", write_through=True))
    root = str(Path(__file__).resolve().parents[1])  # where the engine package is
    if root not in sys.path:
        sys.path.append(root)
    try:
        from engine.runner import run

        code = run(spec)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    for t in threading.enumerate():  # what interpreter shutdown does: wait for non-daemon threads
        if t is not threading.current_thread() and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    return code


def _exec(argv: list[str], env: dict) -> int:
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # as subprocess does: the defaults for a command
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvpe(argv[0], argv, env)
    except (OSError, ValueError) as exc:
        note(f"could not start {argv[0]!r}: {exc}")
    return 127


def _spawn(argv: list[str], env: dict, close: tuple) -> int | None:
    """posix_spawn the command: what the forked child of _start does for it (its own process
    group, stdin /dev/null, the supervisor's descriptors in `close` closed, SIGPIPE and SIGXFSZ
    back to their defaults: handled signals are reset by the exec itself), then execvpe's PATH
    search in the task's environment. None when it cannot be started (noted in the log, as
    _exec notes it: the try fails with 127)."""
    name = argv[0] if argv else ""
    try:
        if not name:
            raise ValueError("empty command")
        path = name if "/" in name else next(
            (c for c in (os.path.join(d, name) for d in os.get_exec_path(env))
             if os.path.isfile(c) and os.access(c, os.X_OK)), None)
        if path is None:
            raise FileNotFoundError(2, "No such file or directory")
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
        actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in close if fd is not None]
        return os.posix_spawn(path, argv, env, setpgroup=0, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
                              file_actions=actions)
    except (OSError, ValueError) as exc:
        note(f"could not start {name!r}: {exc}")
        return None


def _start(task: dict, close: tuple) -> int | None:
    """Start the task's main process (its own process group, stdin /dev/null): a command by
    _spawn, the PythonTask runner in a forked child. None: it could not be started."""
    if "runner" not in task and hasattr(os, "posix_spawn"):
        env = {str(k): str(v) for k, v in (task.get("env") or {}).items()}
        return _spawn(list(task["argv"]), env, close)
    sys.stdout.flush()
    sys.stderr.flush()
    # The forked child starts with the supervisor's handlers: a SIGTERM forwarded to it before it
    # resets them would only set a flag in its copy of the supervisor, and the task would run on.
    # So the handled signals stay blocked across the fork until the child has put back the
    # defaults; one that came meanwhile is delivered then, and ends the task as it should.
    handled = {signal.SIGTERM, signal.SIGCHLD, KILL_NOW}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, handled)
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        raise
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return pid
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in handled:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for fd in close:
            if fd is not None:
                os.close(fd)
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        env = {str(k): str(v) for k, v in (task.get("env") or {}).items()}
        code = _run_python(task["runner"], env) if "runner" in task else _exec(task["argv"], env)
    except BaseException:  # noqa: BLE001 - the child must end here, whatever happened
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def supervise(task: dict, lifeline: int | None = None) -> int:
    """Run one try (task: {"argv": [...]} or {"runner": spec}, and "env") under supervision.
    Returns its status: the exit code, or -N when signal N ended the task."""
    if os.getsid(0) != os.getpid():
        os.setsid()
    reaper = set_subreaper(True)
    flags = {"term": False, "kill": False}

    def on_signal(signum, frame):
        flags["term" if signum == signal.SIGTERM else "kill"] = True

    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(KILL_NOW, on_signal)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # only to wake the select below
    pid = _start(task, (wake_r, wake_w, lifeline))
    if pid is None:
        return 127
    tree = _Tree(pid)
    if not reaper and tree.proc:
        note("not a child subreaper here: processes the task orphans are not followed")
    forwarded = False
    watch = [wake_r] + ([lifeline] if lifeline is not None else [])
    while tree.status is None:
        if flags["kill"]:
            tree.signal(signal.SIGKILL)
        elif flags["term"] and not forwarded:
            tree.signal(signal.SIGTERM)
            forwarded = True
        ready, _, _ = select.select(watch, [], [], POLL)
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        if lifeline in ready and not os.read(lifeline, 512):
            killed = tree.kill_all()
            note(f"the worker is gone (its lifeline closed): killed the try's {len(killed)} process(es)")
            return tree.status if tree.status is not None else -signal.SIGKILL
        tree.reap()
    killed = tree.kill_all()
    if killed:
        note(f"the task ended ({_describe(tree.status)}); killed {len(killed)} process(es) it left running: "
             + ", ".join(killed[:10]) + (" ..." if len(killed) > 10 else ""))
    return tree.status


def _describe(status: int) -> str:
    return f"exit {status}" if status >= 0 else f"signal {-status}"


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f"{pid} ({f.read().strip()})"
    except OSError:
        return str(pid)


def exit_with(status: int) -> None:
    """End this process the way the task ended: its exit code, or killed by its signal."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if status >= 0:
        os._exit(status)
    sig = -status
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file of the supervisor
    except (ImportError, ValueError, OSError):
        pass
    if sig != signal.SIGKILL:
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    try:
        os.kill(os.getpid(), sig)
    except OSError:
        pass
    os._exit(128 + sig)  # a signal that does not end a process


def main() -> None:
    spec = json.loads(sys.stdin.buffer.read())
    exit_with(supervise(spec["task"], spec.get("lifeline")))


if __name__ == "__main__":
    main()
