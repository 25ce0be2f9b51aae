"""Exceptions task code may raise to steer how a try ends."""
from __future__ import annotations

from datetime import timedelta


class SkipTask(Exception):
    """Raised by a PythonTask callable: the try ends as `skipped` (the runner exits with 99)."""


class Defer(Exception):
    """Raised by a PythonTask callable: stop running, free the worker slot, and continue in
    ``method(event, **kwargs)`` once ``trigger`` fires (see docs/deferral.md).

    ``method`` names a function of the python_callable's module, or is a full
    "module.path:function" reference. ``timeout`` (seconds or a timedelta) bounds the wait:
    when it passes, the try fails (and is retried if retries remain).

    Everything must be storable (engine.taskvalues.check_defer): kwargs and the trigger's
    arguments plain JSON, timeout within 100 years. Otherwise the try fails with the reason."""

    def __init__(self, trigger, method: str = "resume", kwargs: dict | None = None, timeout=None):
        super().__init__(f"deferred to {type(trigger).__name__}, resuming in {method}")
        self.trigger, self.method, self.kwargs = trigger, method, kwargs or {}
        self.timeout = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout

    def to_json(self) -> dict:
        """What the runner hands to the worker (and the worker to defer_ti_v1)."""
        classpath, trigger_kwargs = self.trigger.serialize()
        return {"classpath": classpath, "trigger_kwargs": trigger_kwargs, "method": self.method,
                "kwargs": self.kwargs, "timeout": None if self.timeout is None else float(self.timeout)}
