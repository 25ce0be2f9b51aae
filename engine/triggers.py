"""Triggers: what a deferred task waits for (docs/deferral.md).

A trigger is an importable class with an ``async def run(self)`` that returns an event, or is
an async generator that yields events (the first one counts). Events and constructor arguments
must be JSON-serialisable: a trigger is stored as its classpath ("module.path:Class") and the
keyword arguments it was built with, and rebuilt by `engine triggerer`, which runs thousands of
them as asyncio tasks. Subclass BaseTrigger (it records the arguments for you):

    class QueueEmpty(BaseTrigger):
        def __init__(self, url, poll=5.0):
            self.url, self.poll = url, poll

        async def run(self):
            while await backlog(self.url):
                await asyncio.sleep(self.poll)
            return {"url": self.url}

The built-in triggers check their arguments when they are serialized (a Defer is raised), with
engine.validate's rules: a bad value fails that try with a one-line reason.

Time comparisons use the database clock: the triggerer measures its host's offset from it and
`db_now()` applies it. A trigger that raises ends its task's try as failed (retried if retries
remain); so does one whose Defer timeout passes (the database decides that, not the trigger).
A trigger may also end the try itself, with no worker: return TriggerEvent(payload, final=True)
(success, payload as the task's result) or TriggerEvent(payload, final=True, failed=True).
"""
from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import sys
from datetime import datetime, timedelta, timezone

from engine.validate import check_date, check_id, check_seconds

_clock_offset = 0.0  # database clock minus this host's clock, in seconds (set by the triggerer)


def set_clock_offset(seconds: float) -> None:
    global _clock_offset
    _clock_offset = seconds


def db_now() -> datetime:
    """The database's current time, as well as this process knows it."""
    return datetime.now(timezone.utc) + timedelta(seconds=_clock_offset)


def _aware(moment) -> datetime:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if not isinstance(moment, datetime):
        raise TypeError(f"moment must be a datetime or an ISO 8601 string, got {moment!r}")
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


class TriggerEvent:
    """What a trigger returns (or yields) when a plain value is not enough.

    ``TriggerEvent(payload)`` is the same as returning ``payload``: the TI resumes in its
    Defer's method with ``payload`` as the event. ``TriggerEvent(payload, final=True)`` ends
    the try without a worker: it succeeds with ``payload`` as its result (None: no result), or
    fails with ``failed=True`` (retried if retries remain), through fire_triggers (fire_triggers_v2).
    """

    __slots__ = ("payload", "final", "failed")

    def __init__(self, payload=None, *, final: bool = False, failed: bool = False):
        if failed and not final:
            raise ValueError("TriggerEvent(failed=True) needs final=True: only a final event ends the try")
        self.payload, self.final, self.failed = payload, bool(final), bool(failed)

    @property
    def state(self) -> str | None:
        """'success' or 'failed' for a final event, None for a resume."""
        return ("failed" if self.failed else "success") if self.final else None

    def __repr__(self):
        flags = (", final=True" if self.final else "") + (", failed=True" if self.failed else "")
        return f"TriggerEvent({self.payload!r}{flags})"


class BaseTrigger:
    """Base of every trigger. ``created_at`` is when the trigger row was written (database
    clock), set by the triggerer before ``run()``."""

    created_at: datetime | None = None

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self._args = (args, kwargs)  # the constructor's arguments, for serialize()
        return self

    def trigger_kwargs(self) -> dict:
        """The keyword arguments that rebuild this trigger (default: the constructor's)."""
        args, kwargs = self._args
        sig = inspect.signature(type(self).__init__)
        bound = sig.bind(None, *args, **kwargs).arguments
        out = {}
        for name, value in list(bound.items())[1:]:
            kind = sig.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                raise TypeError(f"{type(self).__name__}: *{name} cannot be serialized; use keyword arguments")
            if kind is inspect.Parameter.VAR_KEYWORD:
                out.update(value)
            else:
                out[name] = value
        return out

    def serialize(self) -> tuple[str, dict]:
        cls = type(self)
        return f"{cls.__module__}:{cls.__qualname__}", self.trigger_kwargs()

    async def run(self):  # pragma: no cover - the subclass's job
        raise NotImplementedError


class DateTimeTrigger(BaseTrigger):
    """Fires at ``moment`` (an aware datetime or an ISO 8601 string; naive means UTC)."""

    def __init__(self, moment):
        self.moment = _aware(moment)

    def trigger_kwargs(self) -> dict:
        return {"moment": check_date(self.moment, "moment", type(self).__name__).isoformat()}

    def fire_at(self) -> datetime:
        return self.moment

    async def run(self):
        while (left := (self.fire_at() - db_now()).total_seconds()) > 0:
            await asyncio.sleep(min(left, 60.0))  # re-read the clock offset now and then
        return {"moment": self.fire_at().isoformat()}


class TimeDeltaTrigger(DateTimeTrigger):
    """Fires ``seconds`` (or a timedelta) after the task deferred, by the database clock."""

    def __init__(self, seconds):
        self.seconds = seconds.total_seconds() if isinstance(seconds, timedelta) else float(seconds)

    def trigger_kwargs(self) -> dict:
        return {"seconds": check_seconds(self.seconds, "seconds", "TimeDeltaTrigger")}

    def fire_at(self) -> datetime:
        return (self.created_at or db_now()) + timedelta(seconds=self.seconds)


class FileTrigger(BaseTrigger):
    """Fires when ``path`` exists on the triggerer's host (checked every ``poke_interval`` s)."""

    def __init__(self, path: str, poke_interval: float = 1.0):
        self.path, self.poke_interval = str(path), float(poke_interval)

    def trigger_kwargs(self) -> dict:
        return {"path": self.path,
                "poke_interval": check_seconds(self.poke_interval, "poke_interval", "FileTrigger", allow_zero=False)}

    async def run(self):
        while not os.path.exists(self.path):
            await asyncio.sleep(self.poke_interval)
        return {"path": self.path}


class EventTrigger(BaseTrigger):
    """Fires when `engine events send KEY [--payload JSON]` is run; the event is the payload.
    The database fires it (send_event_v2): the triggerer only holds it, and drops it once fired."""

    def __init__(self, key: str):
        self.key = str(key)

    def trigger_kwargs(self) -> dict:
        return {"key": check_id(self.key, "event key", "EventTrigger")}

    async def run(self):
        await asyncio.Event().wait()  # forever: the event arrives through the database


def load_trigger(classpath: str, kwargs: dict | None, dag_folder: str | None = None) -> BaseTrigger:
    """Import "module.path:Class" (looking in the DAG folder too) and build it from kwargs."""
    if dag_folder and dag_folder not in sys.path:
        sys.path.append(dag_folder)
    module_name, sep, name = classpath.partition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"bad trigger classpath {classpath!r}; use 'module.path:Class'")
    obj = importlib.import_module(module_name)
    for part in name.split("."):
        obj = getattr(obj, part)
    if not callable(getattr(obj, "run", None)):
        raise TypeError(f"trigger {classpath} has no run() method")
    return obj(**(kwargs or {}))


async def first_event(trigger):
    """Run a trigger until its first event: run()'s return value, or the first value it yields."""
    result = trigger.run()
    if inspect.isasyncgen(result):
        try:
            async for event in result:
                return event
        finally:
            await result.aclose()
        raise RuntimeError(f"{type(trigger).__name__}.run() ended without an event")
    if inspect.isawaitable(result):
        return await result
    raise TypeError(f"{type(trigger).__name__}.run() must be async (a coroutine or an async generator)")


__all__ = ["TriggerEvent", "BaseTrigger", "DateTimeTrigger", "TimeDeltaTrigger", "FileTrigger", "EventTrigger",
           "load_trigger", "first_event", "db_now", "set_clock_offset"]
