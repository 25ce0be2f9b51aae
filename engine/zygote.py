"""The worker's zygote: a warm, pre-imported process that forks each try's supervisor, instead of
a fresh interpreter per try (`python -P engine/supervisor.py`, ~20-40 ms of start-up and,
for a PythonTask, the engine's imports again in every try).

The worker starts one zygote (`python -P engine/zygote.py FD`) with the tasks' environment
(worker.task_base_env: no ENGINE_* settings, no credentials) and no database connection: it
never imports SQLAlchemy nor opens a connection, so a forked try inherits nothing of the
worker's. It imports the supervisor, the PythonTask runner and the engine package once, then
serves requests on a SOCK_SEQPACKET socket pair:

    worker -> zygote   {"id": n, "cwd": dir, "spec": {...}}  + fds [log file, lifeline read end]
                       (a spec too large for one message: {"id": n, "cwd": dir} + fds [spec file,
                       log file, lifeline read end])
    zygote -> worker   {"id": n, "pid": p}    + fd  [pidfd of p]     (or {"id": n, "error": ...})
    zygote -> worker   {"exit": p, "status": s}   (s as Popen.returncode: -N for signal N)

For each request it forks a child that becomes exactly what `python -P engine/supervisor.py`
would have been: its own session (setsid), cwd the DAG folder, stdin /dev/null, stdout and
stderr the try's log, the spec read from the spec file, the lifeline passed on, default signal
dispositions, no other descriptor of the zygote or of other tries; then
`supervisor.supervise()` runs it and the child exits with the try's status
(supervisor.exit_with). Every guarantee of engine/supervisor.py therefore holds unchanged: the
try's tree dies when the task ends, when the worker closes the lifeline (kill -9 of the worker
included) and on KILL_NOW; timeouts and kills come from the worker, sent to the supervisor
through its pidfd (never to a reused pid).

The worker sees each supervisor through a `ZygoteChild` (the part of subprocess.Popen the
worker uses: pid, poll(), send_signal()). The zygote reaps its children and reports their
status. The zygote exits when the worker's end of the socket closes (the worker died or
stopped); supervisors it forked keep their lifelines and end with their tries. When the zygote
dies or refuses a request, the worker starts that try the old way (engine.worker.start_child
with a fresh interpreter), logs it, and starts a new zygote at most once per RESPAWN_DELAY.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path

MAX_MESSAGE = 65536
RESPAWN_DELAY = 60.0         # seconds between attempts to start a new zygote after one died
ZYGOTE = Path(__file__).resolve()


# ---- the worker's side --------------------------------------------------------------------------

class ZygoteError(Exception):
    """The zygote cannot start this try: the worker starts it the old way."""


class ZygoteChild:
    """A try's supervisor forked by the zygote, seen as the worker sees a subprocess.Popen.

    Started with a `fallback` (Zygote.spawn), it is *pending* until the zygote's answer is read:
    `pid` is None meanwhile, poll() says it runs, send_signal() and wait() wait for the answer
    first. When the zygote refuses the request, dies or does not answer in time, the try is
    started the old way by fallback(lifeline read end, reason), and this object stands for the
    Popen it returns."""

    def __init__(self, zygote: "Zygote", pid: int | None, pidfd: int | None, rid: int | None = None,
                 fallback=None, lifeline: int | None = None, timeout: float = 10.0):
        self.zygote, self.pid, self.pidfd = zygote, pid, pidfd
        self.returncode: int | None = None
        self.lifeline = None         # set by the worker, as for a Popen
        self.popen = None            # the fallback's Popen, when the zygote could not start the try
        self._rid, self._fallback, self._read_end = rid, fallback, lifeline
        self._deadline = time.monotonic() + timeout

    @property
    def pending(self) -> bool:
        return self.pid is None

    def _settle(self, block: float = 0.0) -> bool:
        """Read the zygote's answer if it came (waiting up to `block` s); False while pending."""
        if self.pid is not None:
            return True
        z = self.zygote
        z.pump(block=block if not z.dead and self._rid not in z._replies else 0.0)
        reply = z._replies.pop(self._rid, None)
        if reply is None and not z.dead and time.monotonic() < self._deadline:
            return False
        msg, fds = reply if reply is not None else (
            {"error": "the zygote is gone" if z.dead else "the zygote did not answer"}, [])
        if reply is None and not z.dead:
            z._died()                # a zygote that does not answer is of no use: stop it
        read_end, self._read_end = self._read_end, None
        try:
            if "error" in msg:
                for fd in fds:
                    os.close(fd)
                try:
                    self.popen = self._fallback(read_end, msg["error"])
                    self.pid = self.popen.pid
                except Exception:  # noqa: BLE001 - the fallback logged why; the try failed to start
                    self.pid, self.returncode = 0, 127
            else:
                self.pid, self.pidfd = msg["pid"], fds[0]
                z.children[self.pid] = self
        finally:
            os.close(read_end)
        return True

    def poll(self) -> int | None:
        if self.returncode is None and self._settle():
            if self.popen is not None:
                self.returncode = self.popen.poll()
                return self.returncode
            self.zygote.pump()
            status = self.zygote.statuses.pop(self.pid, None)
            if status is not None:
                self._ended(status)
            elif self.zygote.dead and _exited(self.pidfd):
                # the zygote died before it could report: the status is lost
                self._ended(_reap_if_ours(self.pid))
        return self.returncode

    def _ended(self, status: int) -> None:
        self.returncode = status
        self.zygote.children.pop(self.pid, None)
        try:
            os.close(self.pidfd)
        except OSError:
            pass

    def send_signal(self, sig: int) -> None:
        while not self._settle(block=0.5):
            pass
        if self.popen is not None:
            if self.returncode is None and self.popen.poll() is None:
                try:
                    self.popen.send_signal(sig)
                except (ProcessLookupError, PermissionError):
                    pass
            return
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self.pidfd, sig)
            except (ProcessLookupError, PermissionError, OSError):
                pass

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise TimeoutError(f"supervisor {self.pid} still running")
            if self.pidfd is not None:
                select.select([self.pidfd], [], [], 0.05)
            elif self.pending:
                self._settle(block=0.05)
            else:
                time.sleep(0.01)     # the fallback's Popen
        return self.returncode


def _exited(pidfd: int) -> bool:
    try:
        return bool(select.select([pidfd], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _reap_if_ours(pid: int) -> int:
    """The status of pid if it was re-parented to us (the worker is a child subreaper), else 1
    (unknown: the zygote that knew it died)."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            return os.waitstatus_to_exitcode(status)
    except ChildProcessError:
        pass
    return 1


class Zygote:
    """The worker's handle on its zygote process."""

    def __init__(self, env: dict):
        import subprocess

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen([sys.executable, "-P", str(ZYGOTE), str(theirs.fileno())], env=env,
                                         stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),),
                                         start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.sock.setblocking(False)
        self.dead = False
        self.statuses: dict[int, int] = {}            # pid -> exit status not yet polled
        self.children: dict[int, ZygoteChild] = {}
        self._replies: dict[int, tuple[dict, list]] = {}
        self._next = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def fileno(self) -> int:
        return self.sock.fileno()

    def _died(self) -> None:
        if not self.dead:
            self.dead = True
            try:
                self.sock.close()
            except OSError:
                pass
            if self.proc.poll() is None:
                self.proc.kill()
            try:
                self.proc.wait(5)
            except Exception:  # noqa: BLE001 - best effort
                pass

    def pump(self, block: float = 0.0) -> None:
        """Read every message that arrived (waiting up to `block` s for the first one)."""
        if self.dead:
            return
        while True:
            if block:
                select.select([self.sock], [], [], block)
                block = 0.0
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, MAX_MESSAGE, 4)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._died()
                return
            if not data:
                self._died()
                return
            msg = json.loads(data)
            if "exit" in msg:
                self.statuses[msg["exit"]] = msg["status"]
                for fd in fds:
                    os.close(fd)
            else:
                self._replies[msg["id"]] = (msg, fds)

    def spawn(self, cwd: str | None, spec: bytes, log_fd: int, lifeline: int, timeout: float = 10.0,
              fallback=None) -> ZygoteChild:
        """Fork a supervisor for one try; raises ZygoteError when the zygote cannot.

        With `fallback` (a function of (a read end of the lifeline, reason) that starts the try
        the old way and returns its Popen), it does not wait for the zygote's answer: the worker
        sends the requests of all the tries it claimed at once, and the zygote forks them while
        the worker goes on (one wait instead of one round trip per try). The ZygoteChild keeps a
        copy of the lifeline's read end until the answer is read, for the fallback."""
        if self.dead:
            raise ZygoteError("the zygote is not running")
        self._next += 1
        rid = self._next
        request = json.dumps({"id": rid, "cwd": cwd, "spec": json.loads(spec)}).encode()
        try:
            if len(request) <= MAX_MESSAGE - 1024:
                socket.send_fds(self.sock, [request], [log_fd, lifeline])
            else:
                import tempfile

                with tempfile.TemporaryFile() as spec_file:
                    spec_file.write(spec)
                    socket.send_fds(self.sock, [json.dumps({"id": rid, "cwd": cwd}).encode()],
                                    [spec_file.fileno(), log_fd, lifeline])
        except (BlockingIOError, InterruptedError):
            raise ZygoteError("the zygote's socket is full") from None
        except OSError as exc:
            self._died()
            raise ZygoteError(f"the zygote is gone ({exc})") from None
        if fallback is not None:
            return ZygoteChild(self, None, None, rid=rid, fallback=fallback, lifeline=os.dup(lifeline),
                               timeout=timeout)
        end = time.monotonic() + timeout
        while rid not in self._replies:
            left = end - time.monotonic()
            if self.dead or left <= 0:
                if not self.dead:
                    self._died()      # a zygote that does not answer is of no use: stop it
                raise ZygoteError("the zygote did not answer")
            self.pump(block=min(left, 0.5))
        msg, fds = self._replies.pop(rid)
        if "error" in msg:
            for fd in fds:
                os.close(fd)
            raise ZygoteError(msg["error"])
        child = ZygoteChild(self, msg["pid"], fds[0])
        self.children[child.pid] = child
        return child

    def close(self) -> None:
        """Stop the zygote (its supervisors go on, each owned by its lifeline)."""
        self._died()


# ---- the zygote process -----------------------------------------------------------------------

def _child(sock: socket.socket, wake: tuple, cwd: str | None, spec: dict | None, *fds: int):
    """In the forked child: become the try's supervisor (what `python -P supervisor.py` is)."""
    from engine import supervisor

    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, supervisor.KILL_NOW):
            signal.signal(sig, signal.SIG_DFL)
        sock.close()
        for fd in wake:
            os.close(fd)
        os.setsid()
        if spec is None:
            spec_fd, log_fd, lifeline = fds
            with os.fdopen(spec_fd, "rb") as f:
                f.seek(0)
                spec = json.loads(f.read())
        else:
            log_fd, lifeline = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        try:
            if cwd:
                os.chdir(cwd)
        except OSError as exc:
            supervisor.note(f"could not change to the DAG folder: {exc}")
            os._exit(127)
        supervisor.exit_with(supervisor.supervise(spec["task"], lifeline))
    except BaseException:  # noqa: BLE001 - the child must end here, whatever happened
        import traceback

        traceback.print_exc()
    os._exit(code)


def serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    for w in (wake_r, wake_w):
        os.set_blocking(w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # a Ctrl-C of the worker's terminal is the worker's
    while True:
        try:
            ready, _, _ = select.select([sock, wake_r], [], [], 1.0)
        except InterruptedError:
            ready = []
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        while True:                  # report every child that ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            try:
                sock.send(json.dumps({"exit": pid, "status": os.waitstatus_to_exitcode(status)}).encode())
            except OSError:
                pass
        if sock not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 4)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return                   # the worker is gone
        rid = None
        try:
            req = json.loads(data)
            rid = req["id"]
            want = 2 if "spec" in req else 3
            if len(fds) != want:
                raise ValueError(f"expected {want} descriptors, got {len(fds)}")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(sock, (wake_r, wake_w), req.get("cwd"), req.get("spec"), *fds)
            pidfd = os.pidfd_open(pid)
            try:
                socket.send_fds(sock, [json.dumps({"id": rid, "pid": pid}).encode()], [pidfd])
            finally:
                os.close(pidfd)
        except Exception as exc:  # noqa: BLE001 - refuse this request; the worker starts it the old way
            try:
                sock.send(json.dumps({"id": rid, "error": f"{type(exc).__name__}: {exc}"}).encode())
            except OSError:
                return
        finally:
            for f in fds:
                try:
                    os.close(f)
                except OSError:
                    pass


def main() -> None:
    root = str(ZYGOTE.parents[1])  # where the engine package is (-P: not on sys.path by itself)
    if root not in sys.path:
        sys.path.append(root)
    # Warm: what every try would otherwise import again (a PythonTask's `from engine import ...`).
    import ctypes  # noqa: F401 - supervisor.set_subreaper
    import threading  # noqa: F401 - the PythonTask runner's: imported in each try, ~3 ms of its CPU

    import engine  # noqa: F401
    import engine.runner  # noqa: F401
    import engine.supervisor  # noqa: F401
    serve(int(sys.argv[1]))


if __name__ == "__main__":
    main()
