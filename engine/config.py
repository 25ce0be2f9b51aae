"""Settings: a default, an ``ENGINE_*`` environment variable and an ``engine.toml`` entry each.

Precedence, highest first: command-line option, environment, ``engine.toml``, default.
``engine config show`` prints every effective value and where it came from.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError


@dataclass(frozen=True)
class Setting:
    name: str
    default: object
    type: type
    help: str


SETTINGS = [
    Setting("database_url", "", str, "SQLAlchemy URL; empty means the embedded PostgreSQL in ENGINE_HOME"),
    Setting("home", ".engine", str, "folder for the embedded database, logs and state"),
    Setting("dags_folder", "dags", str, "default PATH of `engine dags sync`"),
    Setting("max_tis", 512, int, "most TIs one queue_tis call may queue"),
    Setting("schedule_batch", 100, int, "most dag runs one schedule_tis call examines"),
    Setting("scheduler_interval", 1.0, float, "seconds between ticks of `engine scheduler`"),
    Setting("worker_concurrency", 8, int, "tasks one worker runs at once"),
    Setting("worker_queues", "default", str, "comma-separated queues a worker claims from"),
    Setting("worker_poll_interval", 0.5, float, "seconds a worker sleeps when nothing is queued"),
    Setting("heartbeat_interval", 5.0, float, "seconds between job heartbeats"),
    Setting("job_heartbeat_threshold", 60.0, float, "seconds without heartbeat after which a job is dead"),
    Setting("orphan_check_interval", 10.0, float, "seconds between orphan checks (reset_orphans) across all schedulers"),
    Setting("queued_timeout", 600.0, float, "seconds a queued TI may wait for a worker before it is requeued"),
    Setting("max_requeues", 3, int, "requeues of a never-claimed TI before it fails"),
    Setting("worker_shutdown_timeout", 30.0, float, "seconds a stopping worker waits for running tasks before handing them back"),
    Setting("log_dir", "", str, "task log folder; empty means HOME/logs"),
    Setting("task_env_passthrough", False, bool, "give tasks the worker's whole environment, ENGINE_* settings "
            "and database credentials included (default: tasks get neither)"),
    Setting("triggerer_capacity", 10000, int, "most triggers one triggerer runs at once"),
    Setting("triggerer_poll_interval", 1.0, float, "seconds between a triggerer's passes (claim, report) when idle"),
    Setting("resume_priority_boost", 1000, int, "priority_weight added to a resumed TI that lost its pool slot "
            "(pool without include_deferred), so it goes ahead of new work of the same pool"),
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
    def log_path(self) -> Path:
        return Path(self.log_dir).expanduser().resolve() if self.log_dir else self.home_path / "logs"


def _coerce(setting: Setting, raw: object, source: str) -> object:
    try:
        if setting.type is bool and isinstance(raw, str):
            return raw.strip().lower() in ("1", "true", "yes", "on")
        value = setting.type(raw)
    except (TypeError, ValueError):
        raise EngineError(
            f"setting {setting.name} from {source}: {raw!r} is not a valid {setting.type.__name__}; fix it"
        ) from None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
        raise EngineError(f"setting {setting.name} from {source}: {raw!r} must be positive; fix it")
    return value


def load_config(overrides: dict[str, object] | None = None, toml_path: str | Path | None = None) -> Config:
    """Resolve every setting. ``overrides`` are command-line options (None means not given)."""
    path = Path(toml_path or os.environ.get("ENGINE_CONFIG") or "engine.toml")
    from_file: dict[str, object] = {}
    if path.is_file():
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise EngineError(f"config file {path}: {exc}; fix the TOML syntax") from None
        from_file = data.get("engine", data)
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
    return Config(values, path)
