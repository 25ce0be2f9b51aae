"""Load DAG files from a path, validate them and return their serialized form (all or nothing)."""
from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

from engine.dag import DAG, capture_dags, serialize_dag
from engine.errors import EngineError

_counter = itertools.count()


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _found_in(top: str, folder: str) -> bool:
    """True if top-level module `top` was imported from `folder` (folder/top.py or folder/top/__init__.py)."""
    file = getattr(sys.modules.get(top), "__file__", None)
    if not file:
        return False
    file = Path(file)
    return str(file.parent) == folder or (file.name == "__init__.py" and str(file.parent.parent) == folder)


def find_dag_files(path: str | Path) -> list[Path]:
    """The .py file itself, or every *.py under the folder (skipping names starting with _ or .), sorted."""
    path = Path(path).expanduser().resolve()
    if not path.exists():
        raise EngineError(f"DAG path {path} does not exist; pass an existing .py file or folder")
    if path.is_file():
        if path.suffix != ".py":
            raise EngineError(f"DAG path {path} is not a .py file; pass a .py file or a folder of them")
        return [path]
    files = []
    for f in sorted(path.rglob("*.py")):
        parts = f.relative_to(path).parts
        if not any(p.startswith(("_", ".")) for p in parts):
            files.append(f)
    return files


def import_dag_file(file: Path) -> list[DAG]:
    """Import one file as a fresh module and return the DAGs created while importing it."""
    name = f"_engine_dagfile_{next(_counter)}_{file.stem}"
    folder = str(file.parent)
    before = set(sys.modules)
    sys.path.insert(0, folder)  # so helper modules next to the DAG file import
    try:
        with capture_dags() as dags:
            spec = importlib.util.spec_from_file_location(name, file)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            finally:
                sys.modules.pop(name, None)
    except EngineError as exc:
        # Our own messages already say what to fix; just name the file.
        raise EngineError(_one_line(f"DAG file {file}: {exc}")) from None
    except BaseException as exc:  # SystemExit/KeyboardInterrupt in a DAG file is still the file's fault
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise EngineError(_one_line(f"DAG file {file}: {type(exc).__name__}: {exc} "
                                    "— fix the file and run `engine dags sync` again")) from None
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
        # Forget helper modules found through the DAG folder so the next sync re-reads them.
        for mod in [m for m in set(sys.modules) - before if _found_in(m.split(".")[0], folder)]:
            del sys.modules[mod]
    for dag in dags:
        dag.fileloc = str(file)
    return dags


def load_dags(path: str | Path) -> list[dict]:
    """Serialized, validated DAGs from a .py file or a folder; raises EngineError on the first problem."""
    seen: dict[str, str] = {}
    result = []
    for file in find_dag_files(path):
        for dag in import_dag_file(file):
            if dag.dag_id in seen:
                raise EngineError(f"dag '{dag.dag_id}' is defined twice ({seen[dag.dag_id]} and {file}); "
                                  "rename one of them")
            seen[dag.dag_id] = str(file)
            try:
                result.append(serialize_dag(dag))
            except EngineError as exc:
                raise EngineError(_one_line(f"DAG file {file}: {exc}")) from None
    return result
