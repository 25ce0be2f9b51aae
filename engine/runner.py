"""`python -m engine.runner`: run one PythonTask try (the worker starts it as a child process).

The spec is JSON on stdin: {"callable": "module.path:function", "kwargs": {...}, "dag_folder": "/dir"}.
The DAG folder goes first on sys.path so modules next to the DAG file import. Exit status:
0 when the callable returns, 99 when it raises SkipTask, 1 on any other exception (traceback
on stderr, which the worker appends to the task log).
"""
from __future__ import annotations

import importlib
import json
import sys
import traceback

from engine.exceptions import SkipTask

SKIP_EXIT_CODE = 99


def load_callable(ref: str, dag_folder: str | None = None):
    """Import "module.path:function", looking in the DAG folder first."""
    if dag_folder:
        sys.path.insert(0, dag_folder)
    module_name, sep, func_name = ref.partition(":")
    if not sep or not module_name or not func_name:
        raise ValueError(f"bad python_callable {ref!r}; use 'module.path:function'")
    fn = getattr(importlib.import_module(module_name), func_name, None)
    if not callable(fn):
        raise AttributeError(f"module {module_name!r} has no callable {func_name!r}")
    return fn


def main() -> int:
    try:
        spec = json.loads(sys.stdin.read())
        fn = load_callable(spec["callable"], spec.get("dag_folder"))
        result = fn(**(spec.get("kwargs") or {}))
    except SkipTask as exc:
        print(f"SkipTask raised{': ' + str(exc) if str(exc) else ''}; the try ends as skipped", file=sys.stderr)
        return SKIP_EXIT_CODE
    except Exception:
        traceback.print_exc()
        return 1
    text = repr(result)
    print(f"Done. Returned value was: {text if len(text) <= 1000 else text[:1000] + '...'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
