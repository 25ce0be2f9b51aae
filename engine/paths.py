"""Where the SQL files, migrations and sample DAGs live (a checkout or an installed wheel)."""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
_REPO = PACKAGE.parent


def _pick(repo_dir: str, package_dir: str) -> Path:
    # In a checkout (and an editable install) the top-level folders are used; a wheel
    # carries them inside the package (see [tool.setuptools.package-dir]).
    candidate = _REPO / repo_dir
    return candidate if candidate.is_dir() else PACKAGE / package_dir


SQL_DIR = _pick("sql", "sql")
MIGRATIONS_DIR = _pick("migrations", "migrations")
EXAMPLES_DIR = PACKAGE / "examples"


def dag_file(fileloc: str, dags_folder: str | Path | None) -> Path:
    """Where the DAG file a `dag.fileloc` names is on this host. `dags sync` stores the path
    relative to the DAGs folder (setting dags_folder), and each worker or triggerer resolves it
    against its own dags_folder; an absolute fileloc (stored before revision 0012, or by
    engine.dagsync.sync called without a DAGs folder, as `engine demo` does) is used as it is.
    ValueError (one line) when a relative one cannot be resolved here."""
    path = Path(fileloc)
    if path.is_absolute():
        return path
    if ".." in path.parts:
        raise ValueError(f"DAG file {fileloc!r} leaves the DAGs folder; sync the DAG again")
    folder = Path(dags_folder or "dags").expanduser().resolve()
    if not folder.is_dir():
        raise ValueError(f"DAG file {fileloc} is relative to the DAGs folder, and this host's dags_folder {folder} "
                         "is not a folder; check the DAGs out there or set dags_folder (ENGINE_DAGS_FOLDER)")
    return folder / path
