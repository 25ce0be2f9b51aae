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
