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
from engine.validate import MAX_ID_LENGTH, MAX_JSON_DEPTH, check_json, check_seconds, check_text, json_depth, parse_json

# How a refused Defer starts its reason (runner and worker).
DEFER_REFUSED = "the task's Defer was refused: "

# Reasons written to task_instance.state_reason / history and trigger.error (TEXT columns:
# MySQL's TEXT holds 65,535 bytes). One line of at most this many characters.
MAX_REASON = 1000


def one_line(text, limit: int = MAX_REASON) -> str:
    """text on one line, without NUL characters or lone surrogates ('?' instead: an exception's
    message may carry bytes that are not UTF-8), at most `limit` characters (ending in '...')."""
    text = str(text).replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def error_text(exc: BaseException) -> str:
    """An exception as "Type: message", on one line (EngineError: just its message)."""
    message = str(exc).strip()
    if isinstance(exc, EngineError):
        return one_line(message)
    return one_line(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


# A Defer's two kwargs together, as JSON text: the worker sends them in one call, and MySQL/MariaDB
# refuse a statement larger than max_allowed_packet (16 MB by default on MariaDB) by dropping the
# connection, which the worker cannot tell from an outage. Escaped, 4 MB of JSON stays under 16 MB.
MAX_DEFER_BYTES = 4_000_000


def check_defer(d) -> dict:
    """The serialized Defer {"classpath", "trigger_kwargs", "method", "kwargs", "timeout"}
    (Defer.to_json()), checked: classpath 'module.path:Class' and method as text without NUL
    (the method at most MAX_ID_LENGTH characters, like the column that keeps it), both kwargs
    plain JSON objects (together at most MAX_DEFER_BYTES of JSON), timeout None or seconds within
    check_seconds. Returns the normalized dict; raises EngineError with one line naming the value
    otherwise."""
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
    size = sum(len(json.dumps(out[k], separators=(",", ":"), ensure_ascii=False).encode())
               for k in ("trigger_kwargs", "kwargs"))
    if size > MAX_DEFER_BYTES:
        raise EngineError(f"the Defer's kwargs and trigger kwargs are {size:,} bytes of JSON; use at most "
                          f"{MAX_DEFER_BYTES:,} (store big data elsewhere and pass its location)")
    timeout = d.get("timeout")
    out["timeout"] = None if timeout is None else check_seconds(timeout, "Defer timeout")
    return out


# Results (a PythonTask's return value, a final trigger event's payload) nest at most this deep:
# MariaDB's JSON refuses a document nested 32 levels deep.
MAX_RESULT_DEPTH = MAX_JSON_DEPTH
RESULT_FIX = ("return plain JSON (dicts, lists, strings, finite numbers, booleans, None) of at most {limit:,} "
              "bytes (setting max_result_bytes), or store big data elsewhere and return its location")


def result_text(value, limit: int, what: str = "the task's result") -> str:
    """A result as the JSON text to store: plain JSON (check_json), nested at most
    MAX_RESULT_DEPTH deep, at most `limit` bytes (UTF-8). EngineError with one line naming the
    problem and the fix otherwise."""
    fix = RESULT_FIX.format(limit=limit)
    if json_depth(value, MAX_RESULT_DEPTH) > MAX_RESULT_DEPTH:
        raise EngineError(f"{what} nests more than {MAX_RESULT_DEPTH} levels deep; {fix}")
    try:
        check_json(value, what)
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except EngineError as exc:
        raise EngineError(f"{one_line(str(exc), 300)}; {fix}") from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise EngineError(f"{what} is not plain JSON ({type(exc).__name__}: {one_line(exc, 200)}); {fix}") from None
    try:
        size = len(text.encode())
    except UnicodeEncodeError:
        raise EngineError(f"{what} holds text that is not valid UTF-8 (a lone surrogate); {fix}") from None
    if size > limit:
        raise EngineError(f"{what} is {size:,} bytes of JSON, more than max_result_bytes ({limit:,}); {fix}")
    return text


def check_result_text(text, limit: int) -> str:
    """A result as JSON text handed over by the runner, checked again (the worker's boundary)."""
    if not isinstance(text, str):
        raise EngineError(f"the task's result must be JSON text, got {type(text).__name__}")
    size = len(text.encode("utf-8", "replace"))
    if size > limit:
        raise EngineError(f"the task's result is {size:,} bytes of JSON, more than max_result_bytes "
                          f"({limit:,}); {RESULT_FIX.format(limit=limit)}")
    return result_text(parse_json(text, "the task's result", "plain JSON"), limit)


def check_event(event):
    """A trigger's event: plain JSON (no NaN/Infinity, no NUL), or EngineError."""
    return check_json(event, "trigger event")


__all__ = ["DEFER_REFUSED", "MAX_REASON", "MAX_RESULT_DEPTH", "one_line", "error_text", "check_defer", "check_event",
           "result_text", "check_result_text"]
