"""Load DAG files from a path, validate them and return their serialized form (all or nothing).

DAG files are user code: they are imported in a child process (`python -m engine.dagbag PATH`),
so a file that calls os._exit(), crashes the interpreter or hangs cannot take the caller with
it or make it report success having loaded nothing. The child reports, on its own copy of
stdout, one JSON line per file before importing it and one line with the result; whatever the
DAG files print goes to its stderr. A child that ends without a result names the file it was
importing.
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

from engine import validate
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
    if validate.utf8_size(str(file)) is None:  # stored as dag.fileloc: text the database takes
        raise EngineError(f"DAG file {str(file)!r}: its path is not valid UTF-8; rename it")
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


DEFAULT_TIMEOUT = 120.0  # seconds the import of all DAG files of one sync may take


def load_dags(path: str | Path, timeout: float = DEFAULT_TIMEOUT) -> list[dict]:
    """Serialized, validated DAGs from a .py file or a folder, imported in a child process;
    raises EngineError (one line) on the first problem."""
    find_dag_files(path)  # a missing path is reported here, without a child
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)  # so the child imports this engine
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        child = subprocess.run([sys.executable, "-m", "engine.dagbag", str(path)], env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        current = _report(exc.stdout or b"")[0]
        raise EngineError(f"DAG file {current or path}: importing took more than {timeout:.0f} s; a DAG file must "
                          "only define DAGs (no waiting, no work at import time)") from None
    current, result = _report(child.stdout)
    if result is None:
        last = _one_line(child.stderr.decode(errors="replace").strip().splitlines()[-1]) if child.stderr.strip() else ""
        last = f" ({last[:300]})" if last else ""
        if child.returncode < 0:
            why = f"the process importing it was killed by signal {-child.returncode}{last} (a crash, or out of memory)"
        else:
            why = (f"the process importing it exited with code {child.returncode}{last}; a DAG file must not call "
                   "exit() or os._exit()")
        raise EngineError(f"DAG file {current or path}: {why} — fix the file and run `engine dags sync` again")
    if "error" in result:
        raise EngineError(result["error"])
    return result["dags"]


def _report(stdout: bytes) -> tuple[str | None, dict | None]:
    """(the file being imported last, the result line or None) from the child's report."""
    current = result = None
    for line in stdout.decode(errors="replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and "file" in item:
            current = item["file"]
        elif isinstance(item, dict) and ("dags" in item or "error" in item):
            result = item
    return current, result


def _child(path: str) -> int:
    """`python -m engine.dagbag PATH`: import the files, report on the original stdout."""
    report = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what DAG files print goes to stderr, not into the report
    sys.stdout = sys.stderr

    def say(item: dict) -> None:
        report.write(json.dumps(item) + "\n")
        report.flush()
    try:
        say({"dags": _load_here(path, lambda f: say({"file": str(f)}))})
    except EngineError as exc:
        say({"error": str(exc)})
    return 0


def _load_here(path: str | Path, on_file=lambda f: None) -> list[dict]:
    """Serialized, validated DAGs from a .py file or a folder; raises EngineError on the first problem."""
    seen: dict[str, str] = {}
    result = []
    for file in find_dag_files(path):
        on_file(file)
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


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
