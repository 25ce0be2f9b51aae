"""Values that task code hands to the engine (a Defer, a trigger's event) and the reasons the
engine writes about a try: checked here, at the boundary, with engine.validate's rules.

Task code is the least trusted input of the engine: a Defer with a NaN kwarg, an
EventTrigger key with a NUL character or a timeout of 1e300 seconds is valid Python, but the
database refuses to store it. Checking before anything is written keeps the failure where it
belongs: the try that produced the value fails with a one-line reason, and the worker or
triggerer that carried it goes on with everybody else's work.
"""
from __future__ import annotations

import json

from engine.errors import EngineError
from engine.validate import MAX_ID_LENGTH, check_json, check_seconds, check_text, parse_json

# How a refused Defer starts its reason (runner and worker).
DEFER_REFUSED = "the task's Defer was refused: "

# Reasons written to task_instance.state_reason / history and trigger.error (TEXT columns:
# MySQL's TEXT holds 65,535 bytes). One line of at most this many characters.
MAX_REASON = 1000


def one_line(text, limit: int = MAX_REASON) -> str:
    """text on one line, without NUL characters, at most `limit` characters (ending in '...')."""
    flat = " ".join(str(text).replace("\x00", " ").split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def error_text(exc: BaseException) -> str:
    """An exception as "Type: message", on one line (EngineError: just its message)."""
    message = str(exc).strip()
    if isinstance(exc, EngineError):
        return one_line(message)
    return one_line(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


def check_defer(d) -> dict:
    """The serialized Defer {"classpath", "trigger_kwargs", "method", "kwargs", "timeout"}
    (Defer.to_json()), checked: classpath 'module.path:Class' and method as text without NUL
    (the method at most MAX_ID_LENGTH characters, like the column that keeps it), both kwargs
    plain JSON objects, timeout None or seconds within check_seconds. Returns the normalized
    dict; raises EngineError with one line naming the value otherwise."""
    if not isinstance(d, dict):
        raise EngineError(f"a Defer must be a JSON object, got {type(d).__name__}")
    classpath = check_text(d.get("classpath"), "trigger classpath", allow_empty=False)
    module, sep, name = classpath.partition(":")
    if not (sep and module.strip() and name.strip()):
        raise EngineError(f"bad trigger classpath {one_line(classpath, 80)!r}; use 'module.path:Class'")
    method = check_text(d.get("method"), "Defer method", allow_empty=False)
    if len(method) > MAX_ID_LENGTH:
        raise EngineError(f"Defer method is {len(method)} characters long; use at most {MAX_ID_LENGTH}")
    out = {"classpath": classpath, "method": method}
    for key, what in (("trigger_kwargs", "trigger kwargs"), ("kwargs", "Defer kwargs")):
        value = d.get(key)
        value = {} if value is None else value
        if not isinstance(value, dict):
            raise EngineError(f"{what} must be a dict of keyword arguments, got {type(value).__name__}")
        out[key] = check_json(value, what)
    timeout = d.get("timeout")
    out["timeout"] = None if timeout is None else check_seconds(timeout, "Defer timeout")
    return out


# Results (a PythonTask's return value, a final trigger event's payload) nest at most this deep:
# MariaDB's JSON functions refuse documents nested deeper than 32 levels.
MAX_RESULT_DEPTH = 32
RESULT_FIX = ("return plain JSON (dicts, lists, strings, finite numbers, booleans, None) of at most {limit:,} "
              "bytes (setting max_result_bytes), or store big data elsewhere and return its location")


def _depth(value) -> int:
    """How deep lists and dicts nest in value (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, tuple, dict)):
            deepest = max(deepest, d)
            if d <= MAX_RESULT_DEPTH:
                stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def result_text(value, limit: int, what: str = "the task's result") -> str:
    """A result as the JSON text to store: plain JSON (check_json), nested at most
    MAX_RESULT_DEPTH deep, at most `limit` bytes (UTF-8). EngineError with one line naming the
    problem and the fix otherwise."""
    fix = RESULT_FIX.format(limit=limit)
    if _depth(value) > MAX_RESULT_DEPTH:
        raise EngineError(f"{what} nests more than {MAX_RESULT_DEPTH} levels deep; {fix}")
    try:
        check_json(value, what)
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except EngineError as exc:
        raise EngineError(f"{one_line(str(exc), 300)}; {fix}") from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise EngineError(f"{what} is not plain JSON ({type(exc).__name__}: {one_line(exc, 200)}); {fix}") from None
    size = len(text.encode())
    if size > limit:
        raise EngineError(f"{what} is {size:,} bytes of JSON, more than max_result_bytes ({limit:,}); {fix}")
    return text


def check_result_text(text, limit: int) -> str:
    """A result as JSON text handed over by the runner, checked again (the worker's boundary)."""
    if not isinstance(text, str):
        raise EngineError(f"the task's result must be JSON text, got {type(text).__name__}")
    if len(text.encode()) > limit:
        raise EngineError(f"the task's result is {len(text.encode()):,} bytes of JSON, more than max_result_bytes "
                          f"({limit:,}); {RESULT_FIX.format(limit=limit)}")
    return result_text(parse_json(text, "the task's result", "plain JSON"), limit)


def check_event(event):
    """A trigger's event: plain JSON (no NaN/Infinity, no NUL), or EngineError."""
    return check_json(event, "trigger event")


__all__ = ["DEFER_REFUSED", "MAX_REASON", "MAX_RESULT_DEPTH", "one_line", "error_text", "check_defer", "check_event",
           "result_text", "check_result_text"]
