"""One set of rules for every value that crosses into the engine: DAG files, settings, CLI
arguments, task-code values (Defer, trigger arguments, events) and worker reports.

A value that Python lets through and the database cannot store or compute with fails later,
inside a stored function, for everyone. So each boundary checks here, before anything is
written, and refuses with one line naming the thing, the value and the allowed range.

The bounds (docs/operations.md, "Limits on values"):
- ids (dag, task, run, pool, queue, executor, event key): see ID_RULE / RUN_ID_RULE; they are
  ASCII, 1-250 characters, never '.' or '..', so any of them is a safe path component;
- durations (retry_delay, max_retry_delay, execution_timeout, Defer timeout, settings in
  seconds): finite, within [0, MAX_SECONDS] (100 years), so `now + delay` fits every
  timestamp column and date arithmetic of both dialects;
- counts and limits: integers within the range given at each use, at most INT32_MAX
  (the INTEGER columns);
- dates: between MIN_DATE and MAX_DATE, so every run's data interval and next fire time
  stay readable by Python and storable by MySQL's DATETIME;
- text: valid UTF-8 (no lone surrogate, which is what Python makes of bytes that are not UTF-8),
  no NUL character (PostgreSQL text and JSON refuse it), at most MAX_TEXT_BYTES (MySQL's TEXT);
- JSON: standard JSON only (no NaN or Infinity, no NUL or lone surrogate in any string or key),
  nested at most MAX_JSON_DEPTH levels (MariaDB refuses deeper documents).
"""
from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone

from engine.errors import EngineError

INT32_MAX = 2**31 - 1
MAX_SECONDS = 100 * 365 * 86400          # 3,153,600,000 s
MAX_SLOTS = 1_000_000                     # pool size and a task's pool_slots
MAX_RETRIES = 1_000
MAX_MAP_LENGTH = 100_000                  # mapped instances of one task in one run
MAX_PRIORITY = INT32_MAX                   # |priority_weight| of a task; effective (summed) weights are clamped
MAX_ID_LENGTH = 250
MAX_TEXT_BYTES = 65_535                   # MySQL's TEXT column (descriptions, bash_command, reasons)
MAX_JSON_DEPTH = 31                       # MariaDB's JSON refuses a document nested 32 levels deep
MIN_DATE = datetime(1970, 1, 1, tzinfo=timezone.utc)
MAX_DATE = datetime(2999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)

# dag, task, pool, queue, executor ids and event keys: Airflow's characters.
ID_CHARS = "A-Z a-z 0-9 _ . -"
ID_RULE = re.compile(r"[A-Za-z0-9_.-]{1,250}")
# Run ids also allow ':' '+' '~' (generated ids look like manual__2026-01-01T00:00:00+00:00).
RUN_ID_CHARS = "A-Z a-z 0-9 _ . - : + ~"
RUN_ID_RULE = re.compile(r"[A-Za-z0-9_.:+~-]{1,250}")


def _where(where: str) -> str:
    return f"{where}: " if where and not where.endswith(": ") else where


def check_id(value, what: str, where: str = "", *, run_id: bool = False) -> str:
    """An id safe as a path component: the rule's characters, 1-250 of them, not '.' or '..'."""
    rule, chars = (RUN_ID_RULE, RUN_ID_CHARS) if run_id else (ID_RULE, ID_CHARS)
    if not isinstance(value, str) or not rule.fullmatch(value) or value in (".", ".."):
        shown = value if not isinstance(value, str) or len(value) <= 60 else value[:60] + "..."
        raise EngineError(f"{_where(where)}bad {what} {shown!r}; use 1-{MAX_ID_LENGTH} characters from {chars} "
                          "(not '.' or '..')")
    return value


def check_text(value, what: str, where: str = "", *, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise EngineError(f"{_where(where)}{what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise EngineError(f"{_where(where)}{what} contains a NUL character (\\x00); remove it")
    size = utf8_size(value)
    if size is None:
        raise EngineError(f"{_where(where)}{what} is not valid UTF-8 (a byte that is not UTF-8, or a lone "
                          "surrogate); write it in UTF-8")
    if size > MAX_TEXT_BYTES:
        raise EngineError(f"{_where(where)}{what} is {size:,} bytes long; use at most {MAX_TEXT_BYTES:,} bytes "
                          "(UTF-8)")
    if not allow_empty and not value.strip():
        raise EngineError(f"{_where(where)}{what} must not be empty")
    return value


def check_int(value, what: str, where: str = "", *, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise EngineError(f"{_where(where)}{what} must be an integer from {lo} to {hi}, got {value!r}")
    if not lo <= value <= hi:
        raise EngineError(f"{_where(where)}{what} must be from {lo} to {hi}, got {value!r}")
    return value


def check_seconds(value, what: str, where: str = "", *, allow_zero: bool = True, hi: float = MAX_SECONDS) -> float:
    """Seconds (int, float or timedelta) -> float, finite and within [0 (or > 0), hi]."""
    if hasattr(value, "total_seconds"):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EngineError(f"{_where(where)}{what} must be seconds (a number or a timedelta), got {value!r}")
    value = float(value)
    span = f"from 0 to {hi:,.0f} seconds" if allow_zero else f"more than 0 and at most {hi:,.0f} seconds"
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero) or value > hi:
        raise EngineError(f"{_where(where)}{what} must be {span}, got {value!r}")
    return value


def check_date(value: datetime, what: str, where: str = "") -> datetime:
    if not MIN_DATE <= value <= MAX_DATE:
        raise EngineError(f"{_where(where)}{what} {value.isoformat()} is out of range; use a date from "
                          f"{MIN_DATE.date()} to {MAX_DATE.date()}")
    return value


def utf8_size(text: str) -> int | None:
    """Bytes of text in UTF-8; None when it holds a lone surrogate (not encodable)."""
    try:
        return len(text.encode())
    except UnicodeEncodeError:
        return None


def json_depth(value, stop: int = MAX_JSON_DEPTH) -> int:
    """How deep lists and dicts nest in value (0 for a scalar; stops counting past `stop`),
    without recursion: a value nested 100,000 deep is measured, not a RecursionError."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, tuple, dict)):
            deepest = max(deepest, d)
            if d <= stop:
                stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _bad_str(text: str) -> str | None:
    if "\x00" in text:
        return "a NUL character"
    if utf8_size(text) is None:
        return "text that is not valid UTF-8 (a lone surrogate)"
    return None


def _find_bad_json(value, path: str) -> str | None:
    """Where value is not plain JSON the database can store (None when it is). Call it on
    values nested at most MAX_JSON_DEPTH deep (check_json does): it recurses."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path} is {value!r} (not JSON)"
    if isinstance(value, str) and _bad_str(value):
        return f"{path} contains {_bad_str(value)}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63 - 1:
        return f"{path} is an integer beyond 64 bits"
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{path} has a non-string key {k!r}"
            if _bad_str(k):
                return f"{path} has a key with {_bad_str(k)}"
            found = _find_bad_json(v, f"{path}[{k!r}]")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _find_bad_json(v, f"{path}[{i}]")
            if found:
                return found
    return None


def check_json(value, what: str, where: str = "", *, max_depth: int = MAX_JSON_DEPTH):
    """Plain JSON: serialisable, no NaN/Infinity, no NUL or lone surrogate in strings or keys,
    nested at most max_depth levels (MAX_JSON_DEPTH, less where the engine stores the value
    inside a document of its own). Returns value."""
    if json_depth(value, max_depth) > max_depth:
        raise EngineError(f"{_where(where)}{what} nests more than {max_depth} levels deep; flatten it "
                          f"(JSON nested at most {max_depth} levels)")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        found = _find_bad_json(value, what)
        raise EngineError(f"{_where(where)}{found or what} must be plain JSON ({exc}); "
                          "use dicts, lists, strings, finite numbers, booleans and null") from None
    found = _find_bad_json(value, what)
    if found:
        raise EngineError(f"{_where(where)}{found}; use plain JSON without NaN, Infinity, NUL characters or "
                          "text that is not UTF-8")
    return value


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str, what: str, example: str):
    """Parse JSON text strictly (NaN, Infinity and NUL refused); one-line EngineError otherwise."""
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except ValueError as exc:
        raise EngineError(f"{what} is not valid JSON ({exc}); pass {example}") from None
    except RecursionError:
        raise EngineError(f"{what} nests more than {MAX_JSON_DEPTH} levels deep; pass {example}") from None
    return check_json(value, what)


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "": 86400}


def parse_age(text: str, what: str, *, hi: float = MAX_SECONDS) -> float:
    """An age like '30d', '12h', '90m', '3600s', '2w' (a bare number is days) -> seconds, more
    than 0 and at most hi; one-line EngineError otherwise."""
    m = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise EngineError(f"{what} {text!r} is not an age; use a number with a unit s, m, h, d or w, e.g. 30d")
    seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    if not math.isfinite(seconds) or seconds <= 0 or seconds > hi:
        raise EngineError(f"{what} {text!r} is out of range; use more than 0 and at most {hi / 86400:,.0f} days")
    return seconds
