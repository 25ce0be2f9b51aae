"""The worker service: claims queued TIs of its queues (claim_tis_v1), runs each try as a child
process in its own process group, and reports how it ended (finish_ti_v1, or defer_ti_v1 when a
PythonTask raised Defer: the runner exits with 100 and leaves the serialized Defer in a file).
The database decides what an outcome means; this module only starts, watches and kills processes.
A claimed resume (next_method set) runs the task's resume method instead (engine.runner).

While the database is unreachable, running tasks go on and their outcomes wait in memory;
the worker retries with a capped exponential backoff and reports them once it is back. On
SIGTERM it stops claiming, lets running tasks finish for up to worker_shutdown_timeout, then
kills the rest and hands each one back (release_ti_v1: the interruption costs no retry).
"""
from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path


from engine import db
from engine.db import DB_DOWN
from engine.errors import EngineError
from engine.jobs import Job, beat_interval
from engine.runner import DEFER_EXIT_CODE

log = logging.getLogger("engine.worker")
KILL_GRACE = 5.0            # seconds between SIGTERM and SIGKILL
START_FAILED_EXIT_CODE = 127
SHUTDOWN_REASON = "worker shut down"


@dataclass
class Outcome:
    ti_id: int
    try_number: int
    exit_code: int
    timed_out: bool = False
    reason: str | None = None
    release: bool = False            # hand the TI back (release_ti_v1) instead of finishing the try
    defer: dict | None = None        # the try raised Defer: report it (defer_ti_v1)


@dataclass
class Child:
    row: dict
    proc: subprocess.Popen
    deadline: float | None           # time.monotonic() after which the try has timed out
    kill_at: float | None = None     # set with SIGTERM: when SIGKILL follows if it is still alive
    timed_out: bool = False
    reason: str | None = None        # set when the worker killed it for another reason
    release: bool = False            # killed by a shutdown: hand the TI back
    defer_file: str | None = None    # where the runner writes a Defer


def child_env(row: dict, task_env: dict | None = None) -> dict:
    """os.environ + the task's env + the ENGINE_* variables describing this try."""
    return {**os.environ, **(task_env or {}),
            "ENGINE_DAG_ID": row["dag_id"], "ENGINE_TASK_ID": row["task_id"], "ENGINE_RUN_ID": row["run_id"],
            "ENGINE_MAP_INDEX": str(row["map_index"]), "ENGINE_TRY_NUMBER": str(row["try_number"]),
            "ENGINE_CONF": json.dumps(row.get("conf") or {})}


def dag_folder(row: dict) -> str | None:
    return str(Path(row["fileloc"]).parent) if row.get("fileloc") else None


def build_command(row: dict, defer_file: str | None = None) -> tuple[list[str], dict, str | None, str]:
    """(argv, env, stdin text or None, description for the log) of one claimed TI."""
    args = row.get("map_args") or {}
    if row["kind"] == "bash":
        command = args.get("bash_command") or row["bash_command"]
        env = {**(row.get("env") or {}), **(args.get("env") or {})}
        return ["bash", "-c", command], child_env(row, env), None, f"bash -c {shlex.quote(command)}"
    if row["kind"] == "python":
        kwargs = {**(row.get("op_kwargs") or {}), **args}
        spec = {"callable": row["python_callable"], "kwargs": kwargs, "dag_folder": dag_folder(row)}
        if defer_file:
            spec["defer_file"] = defer_file
        what = f"python {row['python_callable']} kwargs={json.dumps(kwargs)[:500]}"
        if row.get("next_method"):
            spec["resume"] = {"method": row["next_method"], "kwargs": row.get("next_kwargs") or {},
                              "event": row.get("event")}
            what = f"resume {row['python_callable']} in {row['next_method']} event={json.dumps(row.get('event'))[:500]}"
        return ([sys.executable, "-m", "engine.runner"], child_env(row, {"PYTHONUNBUFFERED": "1"}),
                json.dumps(spec), what)
    raise ValueError(f"unknown task kind {row['kind']!r}")


def _die_with_worker() -> None:
    """In the child, before exec: get SIGKILL when the worker dies, even by kill -9, so a dead
    worker's task cannot run on while reset_orphans_v1 hands the TI to another (Linux only;
    processes the task starts itself are not covered: systemd's KillMode is, see docs)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


try:
    import ctypes
    _PRCTL = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _PRCTL = None


def start_child(row: dict, defer_file: str | None = None) -> subprocess.Popen:
    """Start one try: header line to the log, then the process with stdout+stderr appended to it."""
    argv, env, stdin_text, what = build_command(row, defer_file)
    log_path = Path(row["log_path"])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    where = f"{row['dag_id']}.{row['task_id']}" + (f"[{row['map_index']}]" if row["map_index"] >= 0 else "")
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with open(log_path, "ab") as out, tempfile.TemporaryFile() as stdin:
        verb = "resuming try" if row.get("next_method") else "try"
        out.write(f"[{stamp}] engine worker: {verb} {row['try_number']} of {where} "
                  f"(run {row['run_id']}): {what}\n".encode())
        out.flush()
        if stdin_text is not None:
            stdin.write(stdin_text.encode())
            stdin.seek(0)
        return subprocess.Popen(argv, cwd=dag_folder(row), env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=stdin if stdin_text is not None else subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_die_with_worker)


def read_defer(path: str | None) -> dict | None:
    """The Defer the runner left in path (and remove the file), or None when there is none."""
    if not path:
        return None
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    try:
        defer = json.loads(text)
    except ValueError:
        return None
    return defer if isinstance(defer, dict) and defer.get("classpath") and defer.get("method") else None


def note_in_log(row: dict, text: str) -> None:
    """Best effort: append one line of the worker's own to the task log."""
    try:
        with open(row["log_path"], "a") as out:
            out.write(f"engine worker: {text}\n")
    except (OSError, TypeError):
        pass


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Send sig to the child's whole process group (it leads its own session)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Worker:
    def __init__(self, eng, cfg, queues: list[str] | None = None, concurrency: int | None = None):
        self.eng, self.cfg = eng, cfg
        self.queues = queues or [q.strip() for q in str(cfg.worker_queues).split(",") if q.strip()]
        self.concurrency = concurrency or cfg.worker_concurrency
        self.job = Job(eng, "worker", beat_interval(cfg))
        self.children: list[Child] = []
        self.unreported: list[Outcome] = []
        self.stopping = False
        self.outage = db.Outage(log, "running tasks continue, retrying")
        self._signals = 0

    def start(self) -> int:
        job_id = self.job.register()
        log.info("worker job %s started on %s: queues %s, concurrency %s",
                 job_id, self.job.hostname, ",".join(self.queues), self.concurrency)
        return job_id

    # ---- database calls that survive an outage ---------------------------------------------------
    def _db(self, doing: str, fn, default=None):
        """fn() against the database, or `default` when it is down (or its backoff is not over)."""
        if not self.outage.due():
            return default
        try:
            result = fn()
        except DB_DOWN as exc:
            self.outage.failed(doing, exc)
            return default
        self.outage.ok()
        return result

    def _report(self, o: Outcome, now=None) -> str | None:
        with db.connect(self.eng) as conn:
            if o.release:
                return db.run(conn, "release_ti", ti_id=o.ti_id, try_number=o.try_number, reason=o.reason,
                              now=now).scalar_one()
            if o.defer is not None:
                d = o.defer
                return db.run(conn, "defer_ti", ti_id=o.ti_id, try_number=o.try_number, classpath=d["classpath"],
                              trigger_kwargs=json.dumps(d.get("trigger_kwargs") or {}), method=d["method"],
                              next_kwargs=json.dumps(d.get("kwargs") or {}), timeout=d.get("timeout"),
                              now=now).scalar_one()
            return db.run(conn, "finish_ti", ti_id=o.ti_id, try_number=o.try_number, exit_code=o.exit_code,
                          timed_out=o.timed_out, reason=o.reason, now=now).scalar_one()

    def _report_pending(self, now=None) -> None:
        """Report every finished try not yet in the database, oldest first; keep them on failure."""
        missing = object()
        while self.unreported:
            o = self.unreported[0]
            state = self._db("reporting finished tasks", lambda: self._report(o, now), missing)
            if state is missing:
                return
            self.unreported.pop(0)
            log.info("ti %s try %s: exit %s%s -> %s", o.ti_id, o.try_number,
                     "deferred" if o.defer is not None else o.exit_code,
                     " (timed out)" if o.timed_out else "", state or "stale report ignored")

    def _heartbeat(self, now=None) -> bool:
        """Beat when due; False only when the database says this job was declared dead."""
        return self._db("heartbeating", lambda: self.job.heartbeat(now=now), True)

    # ---- children --------------------------------------------------------------------------------
    def _launch(self, row: dict) -> None:
        timeout = row.get("execution_timeout")
        defer_file = None
        try:
            if row["kind"] == "python":
                fd, defer_file = tempfile.mkstemp(prefix="engine-defer-", suffix=".json")
                os.close(fd)  # stays empty unless the task defers
            proc = start_child(row, defer_file)
        except (OSError, ValueError, TypeError, subprocess.SubprocessError) as exc:
            reason = f"could not start the task: {type(exc).__name__}: {exc}"
            log.error("ti %s (%s.%s): %s", row["ti_id"], row["dag_id"], row["task_id"], reason)
            note_in_log(row, reason)
            read_defer(defer_file)  # removes it
            self.unreported.append(Outcome(row["ti_id"], row["try_number"], START_FAILED_EXIT_CODE, False, reason))
            return
        deadline = time.monotonic() + timeout if timeout else None
        self.children.append(Child(row, proc, deadline, defer_file=defer_file))

    def _terminate(self, child: Child, reason: str | None = None, timed_out: bool = False,
                   grace: float | None = None) -> None:
        """SIGTERM the child's group now, SIGKILL it after `grace` seconds (KILL_GRACE by default)."""
        kill_at = time.monotonic() + (KILL_GRACE if grace is None else grace)
        if child.kill_at is None:
            child.kill_at, child.timed_out, child.reason = kill_at, timed_out, reason
            note_in_log(child.row, f"{reason or 'execution_timeout exceeded'}; sending SIGTERM")
            signal_group(child.proc, signal.SIGTERM)
        child.kill_at = min(child.kill_at, kill_at)

    def _reap(self) -> int:
        """Collect exited children, enforce timeouts and the SIGKILL grace period."""
        finished, now = 0, time.monotonic()
        for child in list(self.children):
            code = child.proc.poll()
            if code is None:
                if child.deadline is not None and now >= child.deadline and child.kill_at is None:
                    log.warning("ti %s exceeded its execution_timeout; terminating", child.row["ti_id"])
                    self._terminate(child, timed_out=True)
                elif child.kill_at is not None and now >= child.kill_at:
                    signal_group(child.proc, signal.SIGKILL)
                continue
            if child.kill_at is not None:
                signal_group(child.proc, signal.SIGKILL)  # leftovers of a killed task's group
            self.children.remove(child)
            if child.reason and code in (0, 99, DEFER_EXIT_CODE):
                code = -signal.SIGTERM  # killed by the worker: a failed try, whatever the task did on SIGTERM
            defer = read_defer(child.defer_file)  # (and remove the file)
            deferred = code == DEFER_EXIT_CODE and not child.timed_out
            reason = child.reason
            if deferred and defer is None:
                reason = "the task deferred but left no valid Defer for the worker"  # a failed try
            self.unreported.append(Outcome(child.row["ti_id"], child.row["try_number"], code, child.timed_out,
                                           reason, child.release, defer if deferred else None))
            finished += 1
        return finished

    def _kill_all(self, reason: str, grace: float, release: bool = False) -> None:
        """SIGTERM every child, SIGKILL after `grace`, wait until all have exited."""
        for child in self.children:
            child.release = release
            self._terminate(child, reason=reason, grace=grace)
        while self.children:
            self._reap()
            if self.children:
                time.sleep(0.05)

    # ---- the service -----------------------------------------------------------------------------
    def run_once(self, now=None) -> dict:
        if self.job.id is None and self._db("registering the worker", self.start) is None:
            return {"claimed": 0, "finished": 0, "running": 0}
        finished = self._reap()
        self._report_pending(now)
        if not self._heartbeat(now):
            log.error("worker job %s was declared dead by another process; killing its tasks", self.job.id)
            self._kill_all("worker job declared dead", grace=0)
            self._report_pending(now)
            raise EngineError(f"worker job {self.job.id} was declared dead (no heartbeat in time); "
                              "its tasks were killed, start the worker again")
        claimed = 0
        free = self.concurrency - len(self.children)
        if free > 0 and not self.stopping and not self.unreported:  # unreported: the database is down
            rows = self._db("claiming tasks", lambda: self._claim(free, now), [])
            for row in rows:
                log.info("ti %s: starting try %s of %s.%s (run %s, map_index %s)", row["ti_id"], row["try_number"],
                         row["dag_id"], row["task_id"], row["run_id"], row["map_index"])
                self._launch(row)
            claimed = len(rows)
            self._report_pending(now)  # tries that failed to start
        return {"claimed": claimed, "finished": finished, "running": len(self.children)}

    def _claim(self, limit: int, now=None) -> list[dict]:
        with db.connect(self.eng) as conn:
            return [dict(r._mapping) for r in db.run(
                conn, "claim_tis", job_id=self.job.id, hostname=self.job.hostname, queues=self.queues,
                limit=limit, log_dir=str(self.cfg.log_path), now=now)]

    def stop(self, timeout: float | None = None) -> None:
        """Stop claiming, let running tries finish for up to `timeout` s (worker_shutdown_timeout),
        then kill the rest and hand their TIs back (release_ti_v1); mark the job finished."""
        timeout = self.cfg.worker_shutdown_timeout if timeout is None else timeout
        self.stopping = True
        log.info("worker job %s stopping%s", self.job.id, " (signal received)" if self._signals else "")
        if self.children:
            log.info("waiting up to %ss for %s running task(s); signal again to kill them now",
                     timeout, len(self.children))
        end = time.monotonic() + timeout
        while self.children and time.monotonic() < end and self._signals < 2:
            self._reap()
            self._report_pending()
            self._heartbeat()  # still alive: the scheduler must not take our tasks meanwhile
            time.sleep(0.1)
        if self.children:
            log.warning("killing %s task(s) still running; handing them back", len(self.children))
            self._kill_all(SHUTDOWN_REASON, grace=KILL_GRACE if self._signals < 2 else 0, release=True)
        self.outage.retry_at = 0.0  # last chance: try the database once more now
        self._report_pending()
        for o in self.unreported:
            log.error("could not report ti %s try %s (exit %s): database unreachable; the scheduler will "
                      "treat it as an orphan", o.ti_id, o.try_number, o.exit_code)
        if self.job.id is not None:
            self._db("finishing the worker job", self.job.finish)
        log.info("worker job %s stopped", self.job.id)

    def _on_signal(self, signum, frame) -> None:
        self._signals += 1  # a second signal: kill running tasks without waiting
        self.stopping = True

    def _pending_work(self) -> int | None:
        def count():
            with db.connect(self.eng) as conn:
                return db.run(conn, "pending_work", queues=self.queues).scalar_one()
        return self._db("checking for pending work", count)

    def loop(self, burst: bool = False) -> None:
        """Run until SIGTERM/SIGINT (or, with burst, until no work is left for our queues)."""
        main = threading.current_thread() is threading.main_thread()
        saved = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
        try:
            while not self.stopping:
                counts = self.run_once()
                if burst and counts["running"] == 0 and not self.unreported and self._pending_work() == 0:
                    log.info("burst mode: no work left for queues %s", ",".join(self.queues))
                    break
                if counts["claimed"] == 0 and not self.stopping:
                    time.sleep(self.cfg.worker_poll_interval)
            self.stop()
        finally:
            if self.children:  # an unexpected error: do not leave tasks running unowned
                self._kill_all("worker crashed", grace=0)
                self._report_pending()
            for sig, handler in saved.items():
                signal.signal(sig, handler)
