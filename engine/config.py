"""Settings: a default, an ``ENGINE_*`` environment variable and an ``engine.toml`` entry each.

Precedence, highest first: command-line option, environment, ``engine.toml``, default.
``engine config show`` prints every effective value and where it came from.
"""
from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from engine import validate
from engine.errors import EngineError

DAY = 86400.0


@dataclass(frozen=True)
class Setting:
    name: str
    default: object
    type: type
    help: str
    lo: float | None = None      # numbers: the allowed range, inclusive
    hi: float | None = None
    positive: bool = False       # numbers: 0 excluded (lo is 0)


SETTINGS = [
    Setting("database_url", "", str, "SQLAlchemy URL; empty means the embedded PostgreSQL in ENGINE_HOME"),
    Setting("home", ".engine", str, "folder for the embedded database, logs and state"),
    Setting("schema", "", str, "keep this deployment apart from others on the same server: the PostgreSQL schema "
            "(the MySQL/MariaDB database) of its tables and procedures; empty: the URL's default"),
    Setting("dags_folder", "dags", str, "the DAGs folder: default PATH of `engine dags sync`, which stores each DAG "
            "file's path relative to it; workers and triggerers find task code under their own dags_folder"),
    Setting("dags_are_paused_at_creation", True, bool, "a DAG new to the database starts paused (as Airflow's "
            "setting of that name); a DAG's is_paused_upon_creation overrides it"),
    Setting("dag_import_timeout", 120.0, float, "seconds `engine dags sync` lets the DAG files of one sync import",
            0, 3600, positive=True),
    Setting("max_tis", 512, int, "most TIs one queue_tis call may queue", 1, 100_000),
    Setting("schedule_batch", 100, int, "most dag runs one schedule_tis call examines", 1, 100_000),
    Setting("scheduler_interval", 1.0, float, "seconds between ticks of `engine scheduler`", 0, 3600, positive=True),
    Setting("worker_concurrency", 8, int, "tasks one worker runs at once", 1, 10_000),
    Setting("worker_queues", "default", str, "comma-separated queues a worker claims from"),
    Setting("worker_zygote", True, bool, "fork tries from a warm, pre-imported process instead of starting a "
            "fresh interpreter for each (engine.zygote)"),
    Setting("listen_poll_interval", 5.0, float, "seconds between the polls of an idle scheduler, worker or triggerer "
            "(never less than its own interval): on PostgreSQL a wake-up (LISTEN) ends the wait sooner; on "
            "MySQL/MariaDB, which have none, a service polls 50 ms after a pass that did work, doubling up to "
            "this (engine/wakeup.py)", 0, 3600, positive=True),
    Setting("worker_poll_interval", 0.5, float, "seconds a worker sleeps when nothing is queued", 0, 3600, positive=True),
    Setting("heartbeat_interval", 5.0, float, "seconds between job heartbeats", 0, 3600, positive=True),
    Setting("job_heartbeat_threshold", 60.0, float, "seconds without heartbeat after which a job is dead",
            0, 7 * DAY, positive=True),
    Setting("orphan_check_interval", 10.0, float, "seconds between orphan checks (reset_orphans) across all schedulers",
            0, DAY, positive=True),
    Setting("queued_timeout", 600.0, float, "seconds a queued TI may wait for a worker before it is requeued",
            0, 30 * DAY, positive=True),
    Setting("max_requeues", 3, int, "requeues of a never-claimed TI before it fails", 0, 1000),
    Setting("worker_shutdown_timeout", 30.0, float, "seconds a stopping worker waits for running tasks before handing them back",
            0, DAY),
    Setting("log_dir", "", str, "task log folder; empty means HOME/logs"),
    Setting("celery_broker_url", "amqp://guest:guest@127.0.0.1:5672//", str, "broker of the celery executor "
            "(`engine dispatcher`, `engine celery-worker`): amqp://... (RabbitMQ) or redis://..."),
    Setting("celery_queue_prefix", "", str, "prefix of the Celery queue names (a TI of queue Q goes to PREFIX+Q): "
            "keeps deployments that share a broker apart"),
    Setting("dispatch_resend_timeout", 300.0, float, "seconds a dispatched TI may wait for its try to start before "
            "its message is re-sent with a new token (the old one can no longer start it)", 0, 86400, positive=True),
    Setting("dispatch_interval", 0.5, float, "seconds between the passes of an idle `engine dispatcher` "
            "(PostgreSQL: woken at once when work is queued)", 0, 3600, positive=True),
    Setting("task_env_passthrough", False, bool, "give tasks the worker's whole environment, ENGINE_* settings "
            "and database credentials included (default: tasks get neither)"),
    Setting("triggerer_capacity", 10000, int, "most triggers one triggerer runs at once", 1, 1_000_000),
    Setting("triggerer_poll_interval", 1.0, float, "seconds between a triggerer's passes (claim, report) when idle",
            0, 3600, positive=True),
    Setting("retention_days", 30.0, float, "days `engine db clean` and the scheduler keep finished runs, tries, "
            "triggers, ended jobs and tick_log rows (`--older-than` overrides)", 0, 36500, positive=True),
    Setting("clean_interval", 3600.0, float, "seconds between the scheduler's retention cleanups across all "
            "schedulers (clean_v1); 0: the scheduler never cleans (run `engine db clean` yourself)", 0, 30 * DAY),
    Setting("clean_batch", 1000, int, "most rows clean_v1 deletes per table per call (one short transaction)",
            1, 100_000),
    Setting("analyze_fraction", 0.1, float, "the scheduler ANALYZEs task_instance, dag_run, task_instance_history "
            "and trigger when the rows changed since their last ANALYZE reach this share of the table (at least 1,000; "
            "analyze_stale_v1) so a surge of new runs is planned with fresh statistics; 0: never (autovacuum only)",
            0, 1000),
    Setting("metrics_port", 0, int, "port of the Prometheus /metrics endpoint of `engine scheduler`, `worker` and "
            "`triggerer` (`--metrics-port`); 0: none", 0, 65535),
    Setting("metrics_host", "0.0.0.0", str, "address the /metrics endpoint listens on"),
    Setting("log_format", "text", str, "log lines of the services: text or json (`--log-format`)"),
    Setting("health_max_queued_age", 600.0, float, "seconds the oldest queued TI may wait before `engine status "
            "--check` reports it", 0, 30 * DAY, positive=True),
    Setting("resume_priority_boost", 1000, int, "priority_weight added to a resumed TI that lost its pool slot "
            "(pool without include_deferred), so it goes ahead of new work of the same pool", 0, validate.INT32_MAX),
    Setting("max_result_bytes", 65536, int, "largest result a task may leave for downstream tasks (its return value, or "
            "a final trigger event), as JSON text in bytes; a bigger one fails the try", 1, 16_000_000),
    Setting("priority_aging", 0.0, float, "aging: priority points a scheduled TI gains per minute it waits, so "
            "constant high-priority load cannot starve low-priority work (docs/priority.md); 0: off", 0, 1_000_000),
    Setting("priority_aging_cap", 1000, int, "aging: the most priority points waiting adds to a TI", 1, 1_000_000),
    Setting("reserve_after", 0.0, float, "seconds a wide TI (pool_slots > 1) waits before its pool keeps the slots "
            "that free up for it until it fits (docs/priority.md); 0: off", 0, 30 * DAY),
    Setting("preempt_cooldown", 300.0, float, "preemption: seconds after a TI was preempted during which it is not "
            "preempted again (docs/priority.md)", 0, 30 * DAY),
    Setting("preempt_max_per_pass", 10, int, "preemption: most TIs one scheduler pass preempts", 0, 100_000),
    Setting("preempt_min_runtime", 60.0, float, "preemption: a TI running for less than this many seconds is "
            "not preempted", 0, 30 * DAY),
    Setting("procedure_versions", "", str, "versions this service calls, e.g. 'queue_tis=2,schedule_tis=1'; "
            "a procedure not named gets its newest installed version with the arguments this release calls"),
]
BY_NAME = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class Value:
    value: object
    source: str  # "default", "env ENGINE_X", "engine.toml", "option --x"


class Config:
    def __init__(self, values: dict[str, Value], toml_path: Path | None):
        self._values = values
        self.toml_path = toml_path

    def __getattr__(self, name: str):
        try:
            return self._values[name].value
        except KeyError:
            raise AttributeError(name) from None

    def items(self):
        return [(s.name, self._values[s.name]) for s in SETTINGS]

    @property
    def home_path(self) -> Path:
        return Path(self.home).expanduser().resolve()

    @property
    def dags_path(self) -> Path:
        return Path(self.dags_folder).expanduser().resolve()

    @property
    def log_path(self) -> Path:
        return Path(self.log_dir).expanduser().resolve() if self.log_dir else self.home_path / "logs"


def _number(setting: Setting, raw: object) -> int | float:
    """raw (TOML value, env or option text) as the setting's number type; ValueError if it is not one."""
    if isinstance(raw, bool):
        raise ValueError
    if setting.type is int:
        if isinstance(raw, float):
            raise ValueError
        return int(raw.strip()) if isinstance(raw, str) else int(raw)
    return float(raw.strip()) if isinstance(raw, str) else float(raw)


def _coerce(setting: Setting, raw: object, source: str) -> object:
    where = f"setting {setting.name} from {source}"
    if setting.type is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            raise EngineError(f"{where}: {raw!r} is not a boolean; use true or false")
        return text in ("1", "true", "yes", "on")
    if setting.type is str:
        if not isinstance(raw, str):
            raise EngineError(f"{where}: {raw!r} is not a string; fix it")
        validate.check_text(raw, setting.name, where)
        if setting.name == "log_format" and raw not in ("text", "json"):
            raise EngineError(f"{where}: {raw!r} is not a log format; use text or json")
        if setting.name == "worker_queues":
            queues = [q.strip() for q in raw.split(",") if q.strip()]
            if not queues:
                raise EngineError(f"{where}: name at least one queue, e.g. 'default'")
            for q in queues:
                validate.check_id(q, "queue", where)
        if setting.name == "dags_folder" and not raw.strip():
            raise EngineError(f"{where}: empty; name the folder that holds the DAG files, e.g. 'dags'")
        if setting.name == "schema" and raw:
            from engine import db
            db.check_schema(raw, where)
        if setting.name == "procedure_versions":
            from engine import calls
            calls.parse_pins(raw, where)
        return raw
    kind = "an integer" if setting.type is int else "a number"
    lo, hi = (int(setting.lo), int(setting.hi)) if setting.type is int else (f"{setting.lo:g}", f"{setting.hi:g}")
    span = f"from {lo} to {hi}" if not setting.positive else f"more than 0 and at most {hi}"
    try:
        value = _number(setting, raw)
    except OverflowError:  # an integer too large for a float
        raise EngineError(f"{where}: {raw!r} is out of range; use {kind} {span}") from None
    except (TypeError, ValueError):
        raise EngineError(f"{where}: {raw!r} is not {kind}; use {kind} {span}") from None
    if (isinstance(value, float) and not math.isfinite(value)) or value < setting.lo or value > setting.hi \
            or (setting.positive and value == 0):
        raise EngineError(f"{where}: {raw!r} is out of range; use {kind} {span}")
    return value


def check(name: str, raw: object, source: str) -> object:
    """``raw`` as setting ``name`` takes it, or a one-line EngineError naming ``source``: a value
    given elsewhere (``engine db explain --arg``) that stands for a setting keeps to its range."""
    return _coerce(BY_NAME[name], raw, source)


def load_config(overrides: dict[str, object] | None = None, toml_path: str | Path | None = None) -> Config:
    """Resolve every setting. ``overrides`` are command-line options (None means not given)."""
    named = toml_path or os.environ.get("ENGINE_CONFIG")
    path = Path(named or "engine.toml")
    if named and not path.is_file():
        what = "--config" if toml_path else "ENGINE_CONFIG"
        raise EngineError(f"config file {path} ({what}) does not exist; fix the path or leave {what} out")
    from_file: dict[str, object] = {}
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise EngineError(f"config file {path}: not UTF-8 (byte {exc.object[exc.start]:#04x} at offset "
                              f"{exc.start}); save it as UTF-8") from None
        try:
            data = tomllib.loads(text)
        except ValueError as exc:  # TOMLDecodeError, or an integer of more than 4300 digits
            raise EngineError(f"config file {path}: {str(exc).split(';')[0]}; fix the TOML syntax") from None
        from_file = data.get("engine", data)
        if not isinstance(from_file, dict):
            raise EngineError(f"config file {path}: [engine] must be a table of settings; see `engine config show`")
        unknown = sorted(set(from_file) - set(BY_NAME))
        if unknown:
            raise EngineError(f"config file {path}: unknown setting {unknown[0]!r}; see `engine config show`")
    else:
        path = None
    values: dict[str, Value] = {}
    for s in SETTINGS:
        env = f"ENGINE_{s.name.upper()}"
        opt = (overrides or {}).get(s.name)
        if opt is not None:
            values[s.name] = Value(_coerce(s, opt, f"--{s.name.replace('_', '-')}"), f"option --{s.name.replace('_', '-')}")
        elif os.environ.get(env, "") != "":
            values[s.name] = Value(_coerce(s, os.environ[env], env), f"env {env}")
        elif s.name in from_file:
            values[s.name] = Value(_coerce(s, from_file[s.name], str(path)), str(path))
        else:
            values[s.name] = Value(s.default, "default")
    cfg = Config(values, path)
    if cfg.job_heartbeat_threshold <= cfg.heartbeat_interval:
        raise EngineError(f"setting job_heartbeat_threshold ({cfg.job_heartbeat_threshold:g} s) must be more than "
                          f"heartbeat_interval ({cfg.heartbeat_interval:g} s), or every job looks dead; raise it")
    return cfg
