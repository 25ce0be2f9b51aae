"""The worker service: claims queued TIs of its queues (the named query claim_tis), runs each try
under a supervisor process (engine.supervisor: the try's processes never outlive it, nor the
worker), and reports how it ended (finish_tis, or defer_ti when a PythonTask raised Defer: the
runner exits with 100 and leaves the serialized Defer in a file; sql/<dialect>/queries/ names the
procedure version each query calls). The database decides what an
outcome means; this module only starts, watches and kills processes. A claimed resume
(next_method set) runs the task's resume method instead (engine.runner).

Tasks get the worker's environment without the engine's settings and credentials
(task_env_passthrough gives them all of it), plus the task's env and the try's ENGINE_*
variables.

While the database is unreachable, running tasks go on and their outcomes wait in memory;
the worker retries with a capped exponential backoff and reports them once it is back. A
report the database refuses (a value it cannot store, an error raised by the procedure)
fails that try instead, with the reason; the worker goes on. On SIGTERM it stops claiming,
lets running tasks finish for up to worker_shutdown_timeout, then kills the rest and hands
each one back (release_ti_v1: the interruption costs no retry).

Stop requests: the worker heartbeats with heartbeat_v3, naming the tries it runs; the database
answers with those an operator ended (`engine tasks clear/kill/mark`, `engine runs
cancel/mark`) or preempt_v1 preempted (state `preempting`, docs/priority.md), and the worker
stops them (SIGTERM, SIGKILL after KILL_GRACE) within one heartbeat interval; a preempted try
goes back to `scheduled` at the first heartbeat that no longer lists it, unless its task
raised Defer on the SIGTERM: that Defer is reported (defer_ti_v3) and the TI is `deferred`
with its progress kept (a try stopped for any other reason that defers is a failed try).
"""
from __future__ import annotations

import contextlib
import errno
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
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote, quote_plus

import sqlalchemy as sa

from engine import db, supervisor, wakeup, zygote
from engine.dag import OUTPUT_KEY
from engine.db import DB_DOWN
from engine.errors import EngineError
from engine.jobs import Job, beat_interval
from engine.paths import dag_file
from engine.runner import DEFER_EXIT_CODE
from engine.taskvalues import DEFER_REFUSED, check_defer, check_result_text, error_text, one_line

log = logging.getLogger("engine.worker")
KILL_GRACE = 5.0            # seconds between SIGTERM and SIGKILL
CHILD_POLL = 0.05           # seconds between looks at running tries when they have no pidfd
START_FAILED_EXIT_CODE = 127
SHUTDOWN_REASON = "worker shut down"
REFUSED = "the database refused the report: "
DROPS_TO_REFUSE = 3  # reports of one try that lost the connection while the database answered: then refused
SUPERVISOR = Path(supervisor.__file__).resolve()


@dataclass
class Outcome:
    ti_id: int
    try_number: int
    exit_code: int
    timed_out: bool = False
    reason: str | None = None
    release: bool = False            # hand the TI back (release_ti_v1) instead of finishing the try
    defer: dict | None = None        # the try raised Defer: report it (defer_ti_v1)
    refusals: int = 0                # how often the database refused a report of this try
    dropped: int = 0                 # how often its report lost the connection while the database answered
    result: str | None = None        # the try's result (JSON text), reported with its success


@dataclass
class Child:
    row: dict
    proc: subprocess.Popen           # the try's supervisor (engine.supervisor)
    deadline: float | None           # time.monotonic() after which the try has timed out
    kill_at: float | None = None     # set with SIGTERM: when SIGKILL follows if it is still alive
    timed_out: bool = False
    reason: str | None = None        # set when the worker killed it for another reason
    release: bool = False            # killed by a shutdown: hand the TI back
    defer_file: str | None = None    # where the runner writes a Defer
    pidfd: int | None = None         # readable once the supervisor has exited (wakes the loop)
    preempted: bool = False          # stopped because preempt_v1 chose it: a Defer it raises is kept


# ---- what a task can reach ----------------------------------------------------------------------

def engine_secrets(cfg=None, eng=None) -> list[str]:
    """Texts a task must not see: the database URL (as configured and as the engine uses it)
    and its password, plain and URL-quoted."""
    urls = [u for u in (getattr(cfg, "database_url", None),) if u]
    if eng is not None and getattr(eng, "url", None) is not None:
        urls.append(eng.url.render_as_string(hide_password=False))
    secrets = set(urls)
    for url in urls:
        try:
            password = sa.engine.make_url(url).password
        except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: the URL itself is the secret
            password = None
        if password:
            secrets.update({str(password), quote(str(password), safe=""), quote_plus(str(password))})
    return sorted(secrets)


def task_base_env(environ=None, secrets=(), passthrough: bool = False) -> dict:
    """The environment every task starts from: `environ` (os.environ) without the engine's own
    settings (every ENGINE_* variable) and without any variable whose value contains one of
    `secrets` (the database URL, its password). With passthrough, all of `environ`."""
    environ = dict(os.environ if environ is None else environ)
    if passthrough:
        return environ
    return {k: v for k, v in environ.items()
            if not k.startswith("ENGINE_") and not any(s in v for s in secrets)}


def child_env(row: dict, task_env: dict | None = None, base: dict | None = None) -> dict:
    """base (task_base_env()) + the task's env + the ENGINE_* variables describing this try."""
    env = {**(task_base_env() if base is None else base), **(task_env or {}),
           "ENGINE_DAG_ID": row["dag_id"], "ENGINE_TASK_ID": row["task_id"], "ENGINE_RUN_ID": row["run_id"],
           "ENGINE_MAP_INDEX": str(row["map_index"]), "ENGINE_TRY_NUMBER": str(row["try_number"]),
           "ENGINE_CONF": json.dumps(row.get("conf") or {})}
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str) or "\x00" in k + v or "=" in k or not k:
            raise ValueError(f"environment variable {one_line(k, 80)!r} of the task is not a name=text pair "
                             "without NUL characters; fix the task's env")
    return env


def dag_folder(row: dict) -> str | None:
    """The folder of the TI's DAG file on this host (row["dags_folder"]: the worker's setting)."""
    return str(dag_file(row["fileloc"], row.get("dags_folder")).parent) if row.get("fileloc") else None


def build_command(row: dict, defer_file: str | None = None, base: dict | None = None) -> tuple[dict, str]:
    """(what the supervisor starts, description for the log) of one claimed TI: {"argv": [...],
    "env": {...}} for a BashTask, {"runner": spec, "env": {...}} for a PythonTask (the runner
    runs in a child forked by the supervisor; spec as engine.runner describes)."""
    args = row.get("map_args") or {}
    if row["kind"] == "bash":
        command = args.get("bash_command") or row["bash_command"]
        env = {**(row.get("env") or {}), **(args.get("env") or {})}
        return {"argv": ["bash", "-c", command], "env": child_env(row, env, base)}, f"bash -c {shlex.quote(command)}"
    if row["kind"] == "python":
        kwargs = {**(row.get("op_kwargs") or {}), **args}
        where = f"task {row['dag_id']}.{row['task_id']}" + (f"[{row['map_index']}]" if row["map_index"] >= 0 else "")
        spec = {"callable": row["python_callable"], "kwargs": kwargs, "dag_folder": dag_folder(row), "where": where}
        if row.get("max_result_bytes"):
            spec["max_result_bytes"] = row["max_result_bytes"]
        if defer_file:
            spec["defer_file"] = defer_file
        what = f"python {row['python_callable']} kwargs={json.dumps(kwargs)[:500]}"
        if row.get("next_method"):
            spec["resume"] = {"method": row["next_method"], "kwargs": row.get("next_kwargs") or {},
                              "event": row.get("event")}
            what = f"resume {row['python_callable']} in {row['next_method']} event={json.dumps(row.get('event'))[:500]}"
        return {"runner": spec, "env": child_env(row, {"PYTHONUNBUFFERED": "1"}, base)}, what
    raise ValueError(f"unknown task kind {row['kind']!r}")


def start_child(row: dict, defer_file: str | None = None, base: dict | None = None,
                zyg: "zygote.Zygote | None" = None) -> subprocess.Popen:
    """Start one try under its supervisor: header line to the log, then the supervisor (own
    session, cwd the DAG folder, the spec on stdin, stdout+stderr appended to the log): forked
    by the worker's zygote `zyg` when given and able to (engine.zygote), else `python -P
    engine/supervisor.py`. The returned Popen's (or ZygoteChild's) `lifeline` is the write end
    of the pipe the supervisor watches: closing it, or the worker's death, kills the try's
    processes. A ZygoteChild may still be pending (the zygote forks it while the worker goes
    on); if the zygote cannot start it, it is started the old way then (`fresh` below)."""
    task, what = build_command(row, defer_file, base)
    env = task_base_env() if base is None else base

    def fresh(lifeline: int, out=None, reason: str | None = None) -> subprocess.Popen:
        """The supervisor in a fresh interpreter (spec on stdin, output appended to the log)."""
        if reason is not None:  # the zygote could not start it after all (Zygote.spawn's fallback)
            log.warning("ti %s: the zygote could not start the try (%s); starting a fresh interpreter instead",
                        row["ti_id"], reason)
        with open(log_path, "ab") if out is None else contextlib.nullcontext(out) as log_file, \
                tempfile.TemporaryFile() as stdin:
            stdin.write(json.dumps({"task": task, "lifeline": lifeline}).encode())
            stdin.seek(0)
            return subprocess.Popen([sys.executable, "-P", str(SUPERVISOR)], cwd=cwd, env=env, stdin=stdin,
                                    stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                                    pass_fds=(lifeline,))

    log_path = Path(row["log_path"])
    if not log_path.parent.is_dir():
        log_path.parent.mkdir(parents=True, exist_ok=True)
    where = f"{row['dag_id']}.{row['task_id']}" + (f"[{row['map_index']}]" if row["map_index"] >= 0 else "")
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    read_end, write_end = os.pipe()
    try:
        with open(log_path, "ab") as out:
            verb = "resuming try" if row.get("next_method") else "try"
            out.write(f"[{stamp}] engine worker: {verb} {row['try_number']} of {where} "
                      f"(run {row['run_id']}): {what}\n".encode())
            out.flush()
            cwd = dag_folder(row)
            proc = None
            if zyg is not None and not zyg.dead:
                if cwd is not None and not os.path.isdir(cwd):  # what Popen would raise
                    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), cwd)
                try:
                    proc = zyg.spawn(cwd, json.dumps({"task": task}).encode(), out.fileno(), read_end,
                                     fallback=lambda lifeline, reason: fresh(lifeline, reason=reason))
                except zygote.ZygoteError as exc:
                    log.warning("ti %s: the zygote could not start the try (%s); starting a fresh "
                                "interpreter instead", row["ti_id"], exc)
            if proc is None:
                proc = fresh(read_end, out)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    proc.lifeline = os.fdopen(write_end, "wb", buffering=0)
    return proc


def read_report(path: str | None, max_result_bytes: int = 65536) -> tuple[dict | None, str | None, str | None]:
    """What the runner left in path (and remove the file): (the checked Defer, None, None), or
    (None, why there is no valid Defer or result, None), or (None, None, the checked result as
    JSON text), or (None, None, None) when the file is empty or missing."""
    if not path:
        return None, None, None
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None, None, None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    if not text.strip():
        return None, None, None
    try:
        report = json.loads(text, parse_constant=lambda name: float("nan"))
        if isinstance(report, dict) and isinstance(report.get("error"), str) and "classpath" not in report:
            return None, one_line(report["error"]), None
        if isinstance(report, dict) and set(report) == {"result"}:
            try:
                return None, None, check_result_text(report["result"], max_result_bytes)
            except Exception as exc:  # noqa: BLE001 - the task's value fails the try only
                return None, one_line(f"the result was refused: {error_text(exc)}"), None
        return check_defer(report), None, None
    except Exception as exc:  # noqa: BLE001 - the task's values (a RecursionError too) fail the try only
        return None, one_line(DEFER_REFUSED + error_text(exc)), None


def result_limit(cfg) -> int:
    """The setting max_result_bytes (its default for a configuration that predates it)."""
    return int(getattr(cfg, "max_result_bytes", 65536))


def needs_inputs(row: dict) -> bool:
    """Whether a claimed PythonTask may take upstream results: an op_kwargs or mapped value that
    is an output reference, or a mapped argument the claim could not fill (mapped over a
    result). A literal None costs one needless task_inputs call, nothing else."""
    if row.get("kind") != "python":
        return False
    values = [*(row.get("op_kwargs") or {}).values(), *(row.get("map_args") or {}).values()]
    # (MySQL's claim reads element 0 of a reference as the reference itself: a one-item array)
    return any(v is None or (isinstance(v, dict) and OUTPUT_KEY in v) for v in values)


class MissingInput(EngineError):
    """An input of a try has no value (the try fails), as opposed to a database that cannot be
    reached while reading it (the try waits for it)."""


def resolve_inputs(conn, row: dict) -> dict:
    """row with its upstream results filled in (task_inputs_v1): op_kwargs references replaced
    by the upstream's output, a mapped argument by its element. MissingInput with one line when
    an input has no value."""
    op_kwargs, map_args = dict(row.get("op_kwargs") or {}), dict(row.get("map_args") or {})
    for r in db.run(conn, "task_inputs", ti_id=row["ti_id"]):
        if not r.found:
            what = f"item {row['map_index']} of the result" if r.mapped else "the result"
            raise MissingInput(f"input {r.name!r} of task {row['dag_id']}.{row['task_id']} needs {what} of upstream "
                              f"task {r.upstream!r} in run {row['run_id']}, and there is none (it did not succeed, "
                              f"returned None{', or returned a shorter list' if r.mapped else ''}); make "
                              f"{r.upstream} return a value, or drop the reference")
        (map_args if r.mapped else op_kwargs)[r.name] = r.value
    return {**row, "op_kwargs": op_kwargs, "map_args": map_args or None}


def note_in_log(row: dict, text: str) -> None:
    """Best effort: append one line of the worker's own to the task log."""
    try:
        with open(row["log_path"], "a") as out:
            out.write(f"engine worker: {text}\n")
    except (OSError, TypeError):
        pass


def open_pidfd(pid: int) -> int | None:
    """A pidfd of a child (Linux 5.3+): readable once it exits, so the worker's wait ends the
    moment a try ends. None where there is none (the loop then looks every CHILD_POLL s)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def signal_child(proc: subprocess.Popen, sig: int) -> None:
    """Send sig to a try's supervisor (SIGTERM: forward it to the task's processes;
    supervisor.KILL_NOW: SIGKILL them all)."""
    try:
        proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass


class Worker:
    def __init__(self, eng, cfg, queues: list[str] | None = None, concurrency: int | None = None):
        self.eng, self.cfg = eng, cfg
        self.queues = queues or [q.strip() for q in str(cfg.worker_queues).split(",") if q.strip()]
        self.concurrency = concurrency or cfg.worker_concurrency
        self.job = Job(eng, "worker", beat_interval(cfg), queues=self.queues)
        self.children: list[Child] = []
        self.unreported: list[Outcome] = []
        # claimed tries whose upstream results could not be read (the database was down): they
        # start once it answers again; meanwhile they count against concurrency and heartbeat
        self.waiting: list[dict] = []
        self._poll = wakeup.Backoff()  # when no notification wakes us (MariaDB)
        self.stopping = False
        self.outage = db.Outage(log, "running tasks continue, retrying")
        self._signals = 0
        self._subreaper = False          # set by loop(): orphans of a killed supervisor come to us
        self.listener: wakeup.Listener | None = None     # set by loop() (PostgreSQL wake-ups)
        self.zygote: zygote.Zygote | None = None         # started by loop() when worker_zygote is on
        self._use_zygote = False
        self._zygote_started = 0.0
        passthrough = bool(getattr(cfg, "task_env_passthrough", False))
        self.task_env = task_base_env(secrets=engine_secrets(cfg, eng), passthrough=passthrough)
        hidden = sorted(set(os.environ) - set(self.task_env))
        if hidden:
            log.info("tasks run without the engine's settings and credentials: %s (task_env_passthrough "
                     "gives them these)", ", ".join(hidden))

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
            return self._report_on(conn, o, now)

    def _report_on(self, conn, o: Outcome, now=None) -> str | None:
        if o.release:
            return db.run(conn, "release_ti", ti_id=o.ti_id, try_number=o.try_number, reason=o.reason,
                          now=now).scalar_one()
        if o.defer is not None:
            d = o.defer
            return db.run(conn, "defer_ti", ti_id=o.ti_id, try_number=o.try_number, classpath=d["classpath"],
                          trigger_kwargs=json.dumps(d.get("trigger_kwargs") or {}), method=d["method"],
                          next_kwargs=json.dumps(d.get("kwargs") or {}), timeout=d.get("timeout"),
                          now=now).scalar_one()
        if o.result is not None:
            return db.run(conn, "finish_ti_result", ti_id=o.ti_id, try_number=o.try_number, exit_code=o.exit_code,
                          timed_out=o.timed_out, reason=o.reason, now=now, result=o.result,
                          max_bytes=result_limit(self.cfg)).scalar_one()
        return db.run(conn, "finish_ti", ti_id=o.ti_id, try_number=o.try_number, exit_code=o.exit_code,
                      timed_out=o.timed_out, reason=o.reason, now=now).scalar_one()

    def _report_batch(self, conn, batch: list[Outcome], now=None) -> list[str | None]:
        """Report several outcomes on conn: every plain finish (with or without a result) in one
        finish_tis call (finish_tis_v3: set-based, fenced per try; one NOTIFY on PostgreSQL), releases
        and deferrals one call each. The new states, in batch order."""
        plain = [o for o in batch if not o.release and o.defer is None]
        states = {}
        if plain:
            rows = db.run(conn, "finish_tis", ti_ids=[o.ti_id for o in plain],
                          try_numbers=[o.try_number for o in plain], exit_codes=[o.exit_code for o in plain],
                          timed_outs=[o.timed_out for o in plain], reasons=[o.reason for o in plain],
                          results=[o.result for o in plain], now=now, max_bytes=result_limit(self.cfg)).all()
            states = {(r.ti_id, r.try_number): r.state for r in rows}
        return [states.get((o.ti_id, o.try_number)) if not o.release and o.defer is None
                else self._report_on(conn, o, now) for o in batch]

    def _report_pending(self, now=None) -> None:
        """Report every finished try not yet in the database, oldest first. While the database
        is unreachable they wait; a report it refuses fails that try instead (_refused).

        The reports go in one transaction (tries that ended together: one round of
        connect/commit instead of one per try), every finish in one finish_tis call; when they
        are all finishes that call is the whole transaction (PostgreSQL: in autocommit, one
        round trip). If it fails (one report refused, the database down), nothing of it is
        committed and they are reported one by one, which tells which report is refused."""
        batch = list(self.unreported)
        plain = [o for o in batch if not o.release and o.defer is None]
        if batch and (len(batch) > 1 or plain) and self.outage.due():
            try:
                with db.connect(self.eng, one_statement=len(plain) == len(batch)) as conn:
                    states = self._report_batch(conn, batch, now)
            except Exception:  # noqa: BLE001 - told apart by the one-by-one reports below
                pass
            else:
                self.outage.ok()
                del self.unreported[:len(batch)]
                for o, state in zip(batch, states):
                    self._reported(o, state)
        while self.unreported:
            o = self.unreported[0]
            if not self.outage.due():
                return
            try:
                state = self._report(o, now)
            except Exception as exc:  # noqa: BLE001 - whatever the driver raises for this report
                if db.is_unreachable(exc) and self._answers():
                    # The database is up, but this report lost the connection (MySQL/MariaDB drop a
                    # statement larger than max_allowed_packet that way): after DROPS_TO_REFUSE
                    # times it is refused, so that it cannot hold back every report behind it.
                    self.unreported[0] = o = replace(o, dropped=o.dropped + 1)
                    if o.dropped >= DROPS_TO_REFUSE:
                        self._refused(EngineError(
                            f"it lost the connection {o.dropped} times while the database answered (on MySQL/"
                            f"MariaDB: larger than max_allowed_packet?): {db.first_line(exc)}"))
                        continue
                    log.warning("ti %s try %s: its report lost the connection while the database answers (%s); "
                                "trying again", o.ti_id, o.try_number, db.first_line(exc))
                    return
                if db.is_unreachable(exc) or db.is_transient(exc):
                    self.outage.failed("reporting finished tasks", exc)
                    return
                self.outage.ok()
                self._refused(exc)
                continue
            self.outage.ok()
            self.unreported.pop(0)
            self._reported(o, state)

    def _answers(self) -> bool:
        """Whether the database answers a trivial statement on a new connection right now."""
        try:
            with db.connect(self.eng) as conn:
                db.run(conn, "db_now").scalar_one()
            return True
        except Exception:  # noqa: BLE001 - any failure: it does not answer
            return False

    @staticmethod
    def _reported(o: Outcome, state: str | None) -> None:
        log.info("ti %s try %s: exit %s%s -> %s", o.ti_id, o.try_number,
                 "deferred" if o.defer is not None else o.exit_code,
                 " (timed out)" if o.timed_out else "", state or "stale report ignored")

    def _refused(self, exc: BaseException) -> None:
        """The database refused the report at the head of unreported: fail that try through
        finish_ti with exit code 1 and the refusal as reason; if that is refused too, with no
        reason; if even that is refused, give the report up (logged), never retry it forever."""
        o = self.unreported[0]
        message = one_line(db.error_message(exc) if hasattr(exc, "orig") else error_text(exc))
        log.error("ti %s try %s: the database refused the report (%s)%s", o.ti_id, o.try_number, message,
                  "; failing the try" if o.refusals < 2 else "; giving the report up")
        if o.refusals >= 2:
            self.unreported.pop(0)
            return
        reason = one_line(REFUSED + message) if o.refusals == 0 else None
        self.unreported[0] = Outcome(o.ti_id, o.try_number, 1, reason=reason, refusals=o.refusals + 1)

    def _heartbeat(self, now=None) -> bool:
        """Beat when due; False only when the database says this job was declared dead. The
        beat also says which running tries an operator stopped (_stop_requested)."""
        return self._db("heartbeating", lambda: self._beat(now), True)

    # ---- stop requests (engine tasks clear/kill/mark, engine runs cancel/mark) -------------------
    def _beat(self, now=None) -> bool:
        """heartbeat_v3 when the heartbeat interval has passed: stamps the job and its running
        TIs, and returns the tries of `running` the database no longer has running for us.
        False when the job was declared dead."""
        job = self.job
        if time.monotonic() - job._last_beat < job.heartbeat_interval:
            return True
        # (a try whose Defer is not reported yet still runs: heartbeat_v3 must not reschedule it;
        # nor a claimed try still waiting for its inputs)
        running = json.dumps([[r["ti_id"], r["try_number"]] for r in [c.row for c in self.children] + self.waiting]
                             + [[o.ti_id, o.try_number] for o in self.unreported if o.defer is not None])
        with db.connect(self.eng) as conn:
            rows = db.run(conn, "worker_heartbeat", job_id=job.id, running=running, now=now).all()
        job._last_beat = time.monotonic()
        if not any(r.ti_id is None and r.state == "alive" for r in rows):
            return False  # the job row says 'dead' (or there is no answer at all)
        self._stop_requested([r for r in rows if r.ti_id is not None])
        return True

    def _stop_requested(self, rows) -> None:
        """Stop each try an operator ended (its TI is no longer running that try for us): SIGTERM
        now, SIGKILL after KILL_GRACE. Its state and reason are already recorded; the report
        that follows is stale and changes nothing."""
        children = {(c.row["ti_id"], c.row["try_number"]): c for c in self.children}
        for r in rows:
            child = children.get((r.ti_id, r.try_number))
            if child is None or child.kill_at is not None:
                continue
            reason = one_line(f"stop requested: the TI is now {r.state}" + (f" ({r.reason})" if r.reason else ""))
            child.preempted = r.state == "preempting"
            log.warning("ti %s try %s: %s; stopping it", r.ti_id, r.try_number, reason)
            self._terminate(child, reason=reason)

    # ---- children --------------------------------------------------------------------------------
    def _launch(self, row: dict) -> None:
        timeout = row.get("execution_timeout")
        defer_file = None
        try:
            if row["kind"] == "python":
                row["max_result_bytes"] = result_limit(self.cfg)
            if needs_inputs(row):
                try:
                    with db.connect(self.eng) as conn:
                        row = resolve_inputs(conn, row)
                except (EngineError, sa.exc.SQLAlchemyError) as exc:
                    if isinstance(exc, MissingInput) or not db.is_unreachable(exc):
                        raise
                    self.outage.failed("reading a try's inputs", exc)  # not the try's fault: it
                    self.waiting.append(row)                           # starts when the database is back
                    return
                self.outage.ok()
        except (EngineError, sa.exc.SQLAlchemyError) as exc:
            why = db.error_message(exc) if hasattr(exc, "orig") else str(exc)
            reason = one_line(f"could not read the task's inputs: {why}")
            log.error("ti %s (%s.%s): %s", row["ti_id"], row["dag_id"], row["task_id"], reason)
            note_in_log(row, reason)
            self.unreported.append(Outcome(row["ti_id"], row["try_number"], 1, False, reason))
            return
        try:
            if row["kind"] == "python":
                fd, defer_file = tempfile.mkstemp(prefix="engine-defer-", suffix=".json")
                os.close(fd)  # stays empty unless the task defers
            proc = start_child(row, defer_file, self.task_env, self._zygote())
        except (OSError, ValueError, TypeError, subprocess.SubprocessError) as exc:
            reason = one_line(f"could not start the task: {type(exc).__name__}: {exc}")
            log.error("ti %s (%s.%s): %s", row["ti_id"], row["dag_id"], row["task_id"], reason)
            note_in_log(row, reason)
            read_report(defer_file)  # removes it
            self.unreported.append(Outcome(row["ti_id"], row["try_number"], START_FAILED_EXIT_CODE, False, reason))
            return
        deadline = time.monotonic() + timeout if timeout else None
        # a zygote's child wakes the loop through the zygote's report of its end, not its pidfd
        pidfd = None if isinstance(proc, zygote.ZygoteChild) else open_pidfd(proc.pid)
        self.children.append(Child(row, proc, deadline, defer_file=defer_file, pidfd=pidfd))

    def _zygote(self) -> "zygote.Zygote | None":
        """The zygote to fork tries from: None when not in loop() or worker_zygote is off; a
        new one when the last died (at most once per zygote.RESPAWN_DELAY; meanwhile tries
        start in a fresh interpreter)."""
        if not self._use_zygote:
            return None
        if self.zygote is not None and not self.zygote.dead:
            return self.zygote
        if self.zygote is not None and time.monotonic() - self._zygote_started < zygote.RESPAWN_DELAY:
            return None
        if self.zygote is not None:
            log.warning("the zygote (pid %s) died; starting a new one", self.zygote.pid)
        self._zygote_started = time.monotonic()
        try:
            self.zygote = zygote.Zygote(self.task_env)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("cannot start a zygote (%s); tries start in a fresh interpreter", exc)
            return None
        return self.zygote

    def _terminate(self, child: Child, reason: str | None = None, timed_out: bool = False,
                   grace: float | None = None) -> None:
        """SIGTERM the try's processes now, SIGKILL them after `grace` seconds (KILL_GRACE by
        default): both through its supervisor."""
        kill_at = time.monotonic() + (KILL_GRACE if grace is None else grace)
        if child.kill_at is None:
            child.kill_at, child.timed_out, child.reason = kill_at, timed_out, reason
            note_in_log(child.row, f"{reason or 'execution_timeout exceeded'}; sending SIGTERM")
            signal_child(child.proc, signal.SIGTERM)
        child.kill_at = min(child.kill_at, kill_at)

    def _reap(self) -> int:
        """Collect exited children, enforce timeouts and the SIGKILL grace period."""
        finished, now, orphans = 0, time.monotonic(), False
        for child in list(self.children):
            code = child.proc.poll()
            if code is None:
                if child.deadline is not None and now >= child.deadline and child.kill_at is None:
                    log.warning("ti %s exceeded its execution_timeout; terminating", child.row["ti_id"])
                    self._terminate(child, timed_out=True)
                elif child.kill_at is not None and now >= child.kill_at:
                    signal_child(child.proc, supervisor.KILL_NOW)
                continue
            self.children.remove(child)
            child.proc.lifeline.close()
            if child.pidfd is not None:
                os.close(child.pidfd)
            orphans = orphans or code < 0  # the supervisor itself may have been killed
            if child.reason and code in (0, 99, DEFER_EXIT_CODE) and not (child.preempted and code == DEFER_EXIT_CODE):
                # killed by the worker: a failed try, whatever the task did on SIGTERM; except a
                # preempted try that deferred on SIGTERM: its Defer is reported (defer_ti_v3)
                code = -signal.SIGTERM
            defer, refused, result = read_report(child.defer_file, result_limit(self.cfg))  # (and remove it)
            deferred = code == DEFER_EXIT_CODE and not child.timed_out
            reason = child.reason
            if deferred and defer is None:  # a failed try
                reason = refused or "the task deferred but left no valid Defer for the worker"
                code = 1
            elif refused and code in (0, 1) and reason is None:
                reason, code = refused, 1  # the runner refused the task's Defer, or the worker its result
            self.unreported.append(Outcome(child.row["ti_id"], child.row["try_number"], code, child.timed_out,
                                           reason, child.release, defer if deferred else None,
                                           result=result if code == 0 and not child.timed_out else None))
            finished += 1
        if orphans and self._subreaper:
            self._kill_orphans()
        return finished

    def _kill_orphans(self) -> None:
        """Kill every child of the worker that is not a running supervisor, with all its
        descendants, until none is left: processes of a try whose supervisor was killed, which
        came to us because the worker is a child subreaper (loop())."""
        me, delay, killed = os.getpid(), 0.001, set()
        while True:
            table = supervisor.process_table() or {}
            known = {c.proc.pid for c in self.children}
            if self.zygote is not None and not self.zygote.dead:
                known.add(self.zygote.pid)
            strays = [pid for pid, (ppid, _) in table.items() if ppid == me and pid not in known]
            if not strays:
                if killed:
                    log.warning("killed %s process(es) left by a killed supervisor: %s", len(killed), sorted(killed))
                return
            for pid in strays:
                victims = [pid, *supervisor.descendants(pid, table)]
                killed.update(victims)
                supervisor.signal_pids(victims, signal.SIGKILL)
            for pid in strays:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

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
        if self.waiting and self.outage.due() and not self.stopping:  # the database may be back
            waiting, self.waiting = self.waiting, []
            for row in waiting:
                self._launch(row)
        claimed = 0
        free = self.concurrency - len(self.children) - len(self.waiting)
        if free > 0 and not self.stopping and not self.unreported and not self.waiting:  # the database is down
            rows = self._db("claiming tasks", lambda: self._claim(free, now), [])
            for row in rows:
                log.info("ti %s: starting try %s of %s.%s (run %s, map_index %s)", row["ti_id"], row["try_number"],
                         row["dag_id"], row["task_id"], row["run_id"], row["map_index"])
                self._launch(row)
            claimed = len(rows)
            self._report_pending(now)  # tries that failed to start
        return {"claimed": claimed, "finished": finished, "running": len(self.children)}

    def _claim(self, limit: int, now=None) -> list[dict]:
        with db.connect(self.eng, one_statement=True) as conn:
            return self._claimed(db.run(conn, "claim_tis", job_id=self.job.id, hostname=self.job.hostname,
                                        queues=self.queues, limit=limit, log_dir=str(self.cfg.log_path), now=now))

    def _claimed(self, result) -> list[dict]:
        """The rows of a claim as the launcher wants them: with this host's DAGs folder, against
        which the TI's relative fileloc is resolved."""
        return [dict(r._mapping, dags_folder=str(self.cfg.dags_path)) for r in result]

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
        # tries still waiting for their inputs never started: hand them back (no retry used)
        self.unreported += [Outcome(r["ti_id"], r["try_number"], 0, reason=SHUTDOWN_REASON, release=True)
                            for r in self.waiting]
        self.waiting = []
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

    def _wait(self) -> None:
        """Wait for something to do: a try ending (its pidfd, or the zygote's report), work
        queued (a notification on engine_queued, PostgreSQL; only when a slot is free), a
        timeout or grace period to enforce, the heartbeat, or the poll interval
        (listen_poll_interval while notifications wake it; polling, wakeup.Backoff up to it)."""
        fds = [c.pidfd for c in self.children if c.pidfd is not None]
        if self.listener.active:
            timeout = wakeup.idle_wait(self.listener, self.cfg, self.cfg.worker_poll_interval)
        else:  # polling (MariaDB): soon after a claim or a finish, backing off to listen_poll_interval
            timeout = self._poll.next(wakeup.poll_ceiling(self.cfg, self.cfg.worker_poll_interval))
        timeout = min(timeout, self.job.heartbeat_interval)
        due = [c.kill_at if c.kill_at is not None else c.deadline for c in self.children
               if c.kill_at is not None or c.deadline is not None]
        if due:  # an execution_timeout or a SIGKILL grace period ends: act on time
            timeout = max(0.0, min(timeout, min(due) - time.monotonic() + 0.01))
        forked = [c for c in self.children if isinstance(c.proc, zygote.ZygoteChild)]
        if forked and not forked[0].proc.zygote.dead:
            fds.append(forked[0].proc.zygote.fileno())  # it reports when one of them ends
        elif len(fds) < len(self.children):
            timeout = min(timeout, CHILD_POLL)
        free = len(self.children) < self.concurrency and not self.unreported
        self.listener.wait(timeout, fds, stop=lambda: self.stopping, listen=free)

    def _pending_work(self) -> int | None:
        def count():
            with db.connect(self.eng) as conn:
                return db.run(conn, "pending_work", queues=self.queues).scalar_one()
        return self._db("checking for pending work", count)

    def loop(self, burst: bool = False) -> None:
        """Run until SIGTERM/SIGINT (or, with burst, until no work is left for our queues)."""
        main = threading.current_thread() is threading.main_thread()
        saved = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
        # A child subreaper: if a supervisor is killed, its try's processes come to us (_reap
        # kills them). Every other child of this process must be a supervisor meanwhile.
        already = supervisor.is_subreaper()
        self._subreaper = already or supervisor.set_subreaper(True)
        self.listener = wakeup.Listener(self.eng, "listen_worker")
        self.listener.open()  # before the first claim: nothing queued after it is missed
        self._use_zygote = bool(getattr(self.cfg, "worker_zygote", True))
        try:
            while not self.stopping:
                counts = self.run_once()
                # without notifications, look again soon after a pass that claimed or finished a try
                self._poll.note(bool(counts["claimed"] or counts["finished"]))
                if burst and counts["running"] == 0 and not self.unreported and self._pending_work() == 0:
                    log.info("burst mode: no work left for queues %s", ",".join(self.queues))
                    break
                if self.stopping:
                    break
                if (counts["claimed"] and len(self.children) < self.concurrency and not self.unreported
                        and not self.listener.active):
                    continue  # polling: more may have been queued meanwhile, look again now
                self._wait()    # a slot frees, work is queued (a notification) or the poll interval
            self.stop()
        finally:
            if self.children:  # an unexpected error: do not leave tasks running unowned
                self._kill_all("worker crashed", grace=0)
                self._report_pending()
            self.listener.close()
            self.listener = None
            self._use_zygote = False
            if self.zygote is not None:
                self.zygote.close()
                self.zygote = None
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            if self._subreaper and not already:
                supervisor.set_subreaper(False)
            self._subreaper = False
