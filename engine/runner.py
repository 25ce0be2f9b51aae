"""`python -m engine.runner`: run one PythonTask try (the worker starts it as a child process).

The spec is JSON on stdin: {"callable": "module.path:function", "kwargs": {...}, "dag_folder": "/dir",
"defer_file": "/tmp/x", "resume": {"method": "name", "kwargs": {...}, "event": ...} or absent}.
The DAG folder goes first on sys.path so modules next to the DAG file import.

Without "resume" the callable is called with kwargs. With it, the try continues after a deferral:
``method(event, **resume_kwargs)`` is called instead, where method names a function of the
callable's module, or is a full "module.path:function" reference (docs/deferral.md).

Exit status: 0 when the call returns, 99 when it raises SkipTask, 100 when it raises Defer
(the serialized Defer is written as JSON to defer_file, for the worker to report through
defer_ti_v1), 1 on any other exception (traceback on stderr, which the worker appends to the
task log).
"""
from __future__ import annotations

import importlib
import json
import sys
import traceback

from engine.exceptions import Defer, SkipTask

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


def main() -> int:
    spec: dict = {}
    try:
        spec = json.loads(sys.stdin.read())
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
            text = json.dumps(exc.to_json())
            with open(spec["defer_file"], "w") as out:
                out.write(text)
        except Exception:
            print("Defer raised, but it cannot be handed to the worker:", file=sys.stderr)
            traceback.print_exc()
            return 1
        print(f"Deferred: {text[:1000]}", flush=True)
        return DEFER_EXIT_CODE
    except Exception:
        traceback.print_exc()
        return 1
    text = repr(result)
    print(f"Done. Returned value was: {text if len(text) <= 1000 else text[:1000] + '...'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
