"""The worker service: claims queued TIs of its queues (claim_tis_v1), runs each try as a child
process in its own process group, and reports how it ended (finish_ti_v1). The database decides
what an outcome means; this module only starts, watches and kills processes.
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

import sqlalchemy as sa

from engine import db
from engine.errors import EngineError
from engine.jobs import Job

log = logging.getLogger("engine.worker")
KILL_GRACE = 5.0            # seconds between SIGTERM and SIGKILL
START_FAILED_EXIT_CODE = 127
# Errors that mean "the database is unreachable right now": keep going, retry later.
DB_DOWN = (EngineError, sa.exc.OperationalError, sa.exc.InterfaceError)


@dataclass
class Outcome:
    ti_id: int
    try_number: int
    exit_code: int
    timed_out: bool = False
    reason: str | None = None


@dataclass
class Child:
    row: dict
    proc: subprocess.Popen
    deadline: float | None           # time.monotonic() after which the try has timed out
    kill_at: float | None = None     # set with SIGTERM: when SIGKILL follows if it is still alive
    timed_out: bool = False
    reason: str | None = None        # set when the worker killed it for another reason


def child_env(row: dict, task_env: dict | None = None) -> dict:
    """os.environ + the task's env + the ENGINE_* variables describing this try."""
    return {**os.environ, **(task_env or {}),
            "ENGINE_DAG_ID": row["dag_id"], "ENGINE_TASK_ID": row["task_id"], "ENGINE_RUN_ID": row["run_id"],
            "ENGINE_MAP_INDEX": str(row["map_index"]), "ENGINE_TRY_NUMBER": str(row["try_number"]),
            "ENGINE_CONF": json.dumps(row.get("conf") or {})}


def dag_folder(row: dict) -> str | None:
    return str(Path(row["fileloc"]).parent) if row.get("fileloc") else None


def build_command(row: dict) -> tuple[list[str], dict, str | None, str]:
    """(argv, env, stdin text or None, description for the log) of one claimed TI."""
    args = row.get("map_args") or {}
    if row["kind"] == "bash":
        command = args.get("bash_command") or row["bash_command"]
        env = {**(row.get("env") or {}), **(args.get("env") or {})}
        return ["bash", "-c", command], child_env(row, env), None, f"bash -c {shlex.quote(command)}"
    if row["kind"] == "python":
        kwargs = {**(row.get("op_kwargs") or {}), **args}
        spec = {"callable": row["python_callable"], "kwargs": kwargs, "dag_folder": dag_folder(row)}
        return ([sys.executable, "-m", "engine.runner"], child_env(row, {"PYTHONUNBUFFERED": "1"}),
                json.dumps(spec), f"python {row['python_callable']} kwargs={json.dumps(kwargs)[:500]}")
    raise ValueError(f"unknown task kind {row['kind']!r}")


def start_child(row: dict) -> subprocess.Popen:
    """Start one try: header line to the log, then the process with stdout+stderr appended to it."""
    argv, env, stdin_text, what = build_command(row)
    log_path = Path(row["log_path"])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    where = f"{row['dag_id']}.{row['task_id']}" + (f"[{row['map_index']}]" if row["map_index"] >= 0 else "")
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with open(log_path, "ab") as out, tempfile.TemporaryFile() as stdin:
        out.write(f"[{stamp}] engine worker: try {row['try_number']} of {where} "
                  f"(run {row['run_id']}): {what}\n".encode())
        out.flush()
        if stdin_text is not None:
            stdin.write(stdin_text.encode())
            stdin.seek(0)
        return subprocess.Popen(argv, cwd=dag_folder(row), env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=stdin if stdin_text is not None else subprocess.DEVNULL,
                                start_new_session=True)


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
        self.job = Job(eng, "worker", cfg.heartbeat_interval)
        self.children: list[Child] = []
        self.unreported: list[Outcome] = []
        self.stopping = False
        self._db_down = False
        self._signals = 0

    def start(self) -> int:
        job_id = self.job.register()
        log.info("worker job %s started on %s: queues %s, concurrency %s",
                 job_id, self.job.hostname, ",".join(self.queues), self.concurrency)
        return job_id

    # ---- database calls that survive an outage ---------------------------------------------------
    def _db_ok(self) -> None:
        if self._db_down:
            log.info("database reachable again")
            self._db_down = False

    def _db_failed(self, what: str, exc: Exception) -> None:
        if not self._db_down:
            log.warning("database unreachable while %s (%s); running tasks continue, retrying",
                        what, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            self._db_down = True

    def _report_pending(self, now=None) -> None:
        """Report every finished try not yet in the database, oldest first; keep them on failure."""
        while self.unreported:
            o = self.unreported[0]
            try:
                with db.connect(self.eng) as conn:
                    state = db.run(conn, "finish_ti", ti_id=o.ti_id, try_number=o.try_number, exit_code=o.exit_code,
                                   timed_out=o.timed_out, reason=o.reason, now=now).scalar_one()
            except DB_DOWN as exc:
                self._db_failed("reporting finished tasks", exc)
                return
            self._db_ok()
            self.unreported.pop(0)
            log.info("ti %s try %s: exit %s%s -> %s", o.ti_id, o.try_number, o.exit_code,
                     " (timed out)" if o.timed_out else "", state or "stale report ignored")

    # ---- children --------------------------------------------------------------------------------
    def _launch(self, row: dict) -> None:
        timeout = row.get("execution_timeout")
        try:
            proc = start_child(row)
        except (OSError, ValueError, TypeError, subprocess.SubprocessError) as exc:
            reason = f"could not start the task: {type(exc).__name__}: {exc}"
            log.error("ti %s (%s.%s): %s", row["ti_id"], row["dag_id"], row["task_id"], reason)
            note_in_log(row, reason)
            self.unreported.append(Outcome(row["ti_id"], row["try_number"], START_FAILED_EXIT_CODE, False, reason))
            return
        deadline = time.monotonic() + timeout if timeout else None
        self.children.append(Child(row, proc, deadline))

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
            if child.reason and code in (0, 99):
                code = -signal.SIGTERM  # killed by the worker: a failed try, whatever the task did on SIGTERM
            self.unreported.append(Outcome(child.row["ti_id"], child.row["try_number"], code,
                                           child.timed_out, child.reason))
            finished += 1
        return finished

    def _kill_all(self, reason: str, grace: float) -> None:
        """SIGTERM every child, SIGKILL after `grace`, wait until all have exited."""
        for child in self.children:
            self._terminate(child, reason=reason, grace=grace)
        while self.children:
            self._reap()
            if self.children:
                time.sleep(0.05)

    # ---- the service -----------------------------------------------------------------------------
    def run_once(self, now=None) -> dict:
        if self.job.id is None:
            self.start()
        finished = self._reap()
        self._report_pending(now)
        try:
            alive = self.job.heartbeat(now=now)  # True without a query when no beat is due
        except DB_DOWN as exc:
            self._db_failed("heartbeating", exc)
            alive = True
        if not alive:
            log.error("worker job %s was declared dead by another process; killing its tasks", self.job.id)
            self._kill_all("worker job declared dead", grace=0)
            self._report_pending(now)
            raise EngineError(f"worker job {self.job.id} was declared dead (no heartbeat in time); "
                              "its tasks were killed, start the worker again")
        claimed = 0
        free = self.concurrency - len(self.children)
        if free > 0 and not self.stopping and not self.unreported:  # unreported: the database is down
            try:
                with db.connect(self.eng) as conn:
                    rows = [dict(r._mapping) for r in db.run(
                        conn, "claim_tis", job_id=self.job.id, hostname=self.job.hostname, queues=self.queues,
                        limit=free, log_dir=str(self.cfg.log_path), now=now)]
                self._db_ok()
            except DB_DOWN as exc:
                self._db_failed("claiming tasks", exc)
                rows = []
            for row in rows:
                log.info("ti %s: starting try %s of %s.%s (run %s, map_index %s)", row["ti_id"], row["try_number"],
                         row["dag_id"], row["task_id"], row["run_id"], row["map_index"])
                self._launch(row)
            claimed = len(rows)
            self._report_pending(now)  # tries that failed to start
        return {"claimed": claimed, "finished": finished, "running": len(self.children)}

    def stop(self, timeout: float = 30) -> None:
        """Stop claiming, let running tries finish for up to `timeout` s, then kill and report them."""
        self.stopping = True
        log.info("worker job %s stopping%s", self.job.id, " (signal received)" if self._signals else "")
        if self.children:
            log.info("waiting up to %ss for %s running task(s); signal again to kill them now",
                     timeout, len(self.children))
        end = time.monotonic() + timeout
        while self.children and time.monotonic() < end and self._signals < 2:
            self._reap()
            self._report_pending()
            time.sleep(0.1)
        if self.children:
            log.warning("killing %s task(s) still running", len(self.children))
            self._kill_all("worker shut down", grace=KILL_GRACE if self._signals < 2 else 0)
        self._report_pending()
        for o in self.unreported:
            log.error("could not report ti %s try %s (exit %s): database unreachable; the scheduler will "
                      "treat it as an orphan", o.ti_id, o.try_number, o.exit_code)
        try:
            self.job.finish()
        except DB_DOWN as exc:
            self._db_failed("finishing the worker job", exc)
        log.info("worker job %s stopped", self.job.id)

    def _on_signal(self, signum, frame) -> None:
        self._signals += 1  # a second signal: kill running tasks without waiting
        self.stopping = True

    def _pending_work(self) -> int | None:
        try:
            with db.connect(self.eng) as conn:
                return db.run(conn, "pending_work", queues=self.queues).scalar_one()
        except DB_DOWN as exc:
            self._db_failed("checking for pending work", exc)
            return None

    def loop(self, burst: bool = False) -> None:
        """Run until SIGTERM/SIGINT (or, with burst, until no work is left for our queues)."""
        main = threading.current_thread() is threading.main_thread()
        saved = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
        try:
            self.start()
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
