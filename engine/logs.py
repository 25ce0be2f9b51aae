"""Log set-up of the command line and services: `--log-format text|json` (setting log_format).

Services log one INFO line per pass that did work and nothing at INFO when idle (the
scheduler's idle passes go to DEBUG). JSON lines carry ts, level, logger, message, and for a
scheduler pass its summary (the same fields as `engine tick --json`) under "summary".
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
               "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        summary = getattr(record, "summary", None)
        if summary is not None:
            out["summary"] = summary
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


_chosen: str | None = None  # the format given by --log-format (wins over the setting)


def setup(verbose: bool, fmt: str | None) -> None:
    """Configure the root logger once per command: INFO with -v, else WARNING."""
    global _chosen
    _chosen = fmt
    # Without force: a second command in the same process (tests' CliRunner) keeps the handler.
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format=TEXT_FORMAT)
    use(fmt or "text")


def use(fmt: str) -> None:
    formatter = JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)


def apply_config(cfg) -> None:
    """The setting log_format (env ENGINE_LOG_FORMAT, engine.toml) when --log-format was not given."""
    if _chosen is None:
        use(cfg.log_format)
