"""`python -m engine.runner`: run one PythonTask try (the worker starts it as a child process).

The spec is JSON on stdin: {"callable": "module.path:function", "kwargs": {...}, "dag_folder": "/dir",
"defer_file": "/tmp/x", "resume": {"method": "name", "kwargs": {...}, "event": ...} or absent}.
The DAG folder goes first on sys.path so modules next to the DAG file import.

Without "resume" the callable is called with kwargs. With it, the try continues after a deferral:
``method(event, **resume_kwargs)`` is called instead, where method names a function of the
callable's module, or is a full "module.path:function" reference (docs/deferral.md).

A value the callable returns (not None) is the try's result: plain JSON of at most
"max_result_bytes" bytes (spec), written as {"result": JSON text} to defer_file for the worker to
report with the success (finish_ti_v3); a value that is not storable fails the try (exit 1,
{"error": why} in the file). "where" names the task in that reason.

Exit status: 0 when the call returns, 99 when it raises SkipTask, 100 when it raises Defer
(the serialized Defer is written as JSON to defer_file, for the worker to report through
defer_ti_v1), 1 on any other exception (traceback on stderr, which the worker appends to the
task log).

A Defer is checked before it is handed over (engine.taskvalues.check_defer: classpath and
method text, both kwargs plain JSON, timeout within engine.validate's bounds). A Defer that
fails the check, or cannot be serialized at all, ends the try as failed (exit 1): the runner
prints one line saying why and writes {"error": that line} to defer_file, which the worker
reports as the try's reason.

run(spec) is the whole runner as a function: the per-try supervisor (engine.supervisor) calls
it in a forked child; `python -m engine.runner` reads the spec from stdin and calls it.
"""
from __future__ import annotations

import importlib
import json
import sys
import traceback

from engine.exceptions import Defer, SkipTask
from engine.errors import EngineError
from engine.taskvalues import DEFER_REFUSED, check_defer, error_text, result_text

SKIP_EXIT_CODE = 99
DEFER_EXIT_CODE = 100


def load_callable(ref: str, dag_folder: str | None = None):
    """Import "module.path:function", looking in the DAG folder first."""
    if dag_folder and dag_folder not in sys.path:
        sys.path.insert(0, dag_folder)
    module_name, sep, func_name = ref.partition(":")
    if not sep or not module_name or not func_name:
        raise ValueError(f"bad python_callable {ref!r}; use 'module.path:function'")
    fn = getattr(importlib.import_module(module_name), func_name, None)
    if not callable(fn):
        raise AttributeError(f"module {module_name!r} has no callable {func_name!r}")
    return fn


def resume_target(callable_ref: str, method: str, dag_folder: str | None = None):
    """The function a resumed try calls: "module:function", or a function of callable_ref's module."""
    if ":" in method:
        return load_callable(method, dag_folder)
    return load_callable(f"{callable_ref.partition(':')[0]}:{method}", dag_folder)


def write_report(spec: dict, report: dict) -> None:
    """Hand a Defer (or why there is none) to the worker: JSON in the spec's defer_file."""
    path = spec.get("defer_file")
    if path:
        with open(path, "w") as out:
            out.write(json.dumps(report, allow_nan=False))


def run(spec: dict) -> int:
    """Run one try as the spec says; returns the exit status (module docstring)."""
    try:
        resume = spec.get("resume")
        if resume:
            fn = resume_target(spec["callable"], resume["method"], spec.get("dag_folder"))
            print(f"Resuming in {resume['method']} after the trigger fired", flush=True)
            result = fn(resume.get("event"), **(resume.get("kwargs") or {}))
        else:
            fn = load_callable(spec["callable"], spec.get("dag_folder"))
            result = fn(**(spec.get("kwargs") or {}))
    except SkipTask as exc:
        print(f"SkipTask raised{': ' + str(exc) if str(exc) else ''}; the try ends as skipped", file=sys.stderr)
        return SKIP_EXIT_CODE
    except Defer as exc:
        try:
            defer = check_defer(exc.to_json())
        except Exception as bad:  # noqa: BLE001 - any error of the task's values fails the try
            reason = DEFER_REFUSED + error_text(bad)
            print(reason, file=sys.stderr, flush=True)
            try:
                write_report(spec, {"error": reason})
            except OSError:
                pass  # the worker then says "no valid Defer"; the line above is in the log
            return 1
        try:
            write_report(spec, defer)
        except OSError:
            print("Defer raised, but it cannot be handed to the worker:", file=sys.stderr)
            traceback.print_exc()
            return 1
        print(f"Deferred: {json.dumps(defer)[:1000]}", flush=True)
        return DEFER_EXIT_CODE
    except Exception:
        traceback.print_exc()
        return 1
    try:
        text = repr(result)
    except Exception as exc:  # noqa: BLE001 - (a RecursionError for a deep value) the check below refuses it
        text = f"<{type(result).__name__}: {type(exc).__name__} in repr>"
    print(f"Done. Returned value was: {text if len(text) <= 1000 else text[:1000] + '...'}", flush=True)
    return hand_result(spec, result)


def hand_result(spec: dict, result) -> int:
    """A returned value other than None is the try's result: checked (plain JSON, nesting, the
    spec's max_result_bytes) and handed to the worker as {"result": JSON text} in defer_file.
    One that fails the check fails the try (exit 1, the reason in the log and the file)."""
    if result is None or not spec.get("defer_file"):
        return 0
    where = spec.get("where") or "the task"
    try:
        text = result_text(result, int(spec.get("max_result_bytes") or 65536), f"the return value of {where}")
        write_report(spec, {"result": text})
    except EngineError as exc:
        reason = f"the result was refused: {exc}"
        print(reason, file=sys.stderr, flush=True)
        try:
            write_report(spec, {"error": reason})
        except OSError:
            pass
        return 1
    except OSError:
        print("the task returned a value, but it cannot be handed to the worker:", file=sys.stderr)
        traceback.print_exc()
        return 1
    return 0


def main() -> int:
    try:
        spec = json.loads(sys.stdin.read())
    except ValueError:
        traceback.print_exc()
        return 1
    return run(spec)


if __name__ == "__main__":
    sys.exit(main())
