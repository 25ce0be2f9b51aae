"""Alembic driven from code: `engine db upgrade | downgrade | current`."""
from __future__ import annotations

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.util.exc import CommandError
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from engine import db, procedures, roles
from engine.errors import EngineError
from engine.paths import MIGRATIONS_DIR


def alembic_config(conn) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = conn
    return cfg


def revisions() -> list[str]:
    """Every revision this engine knows, oldest first."""
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def check_known(current: str | None) -> None:
    """Refuse a database migrated by a newer release than this engine (one line)."""
    if current is not None and current not in revisions():
        raise EngineError(f"database schema is at revision {current}, which this engine (newest revision {head()}) "
                          "does not know: a newer release migrated it; run that release's engine")


def _alembic(fn, conn, revision: str) -> None:
    try:
        fn(alembic_config(conn), revision)
    except CommandError as exc:
        raise EngineError(f"cannot migrate to {revision!r}: {' '.join(str(exc).split())}; known revisions: base, "
                          f"{', '.join(revisions())}") from None


def upgrade(eng, revision: str = "head") -> list[str]:
    """Migrate to ``revision`` and reinstall drifted or missing objects. Returns repaired names."""
    if eng.dialect.name == "postgresql":
        db.ensure_database(eng)  # the schema of setting `schema` (MySQL: `engine db upgrade` creates the database)
    check_known(current(eng))
    with eng.begin() as conn:
        _alembic(command.upgrade, conn, revision)
    repaired: list[str] = []
    if revision == "head":
        with eng.begin() as conn:
            repaired = procedures.repair(conn)
        roles.reapply(eng)  # reinstalled and new procedures get their grants back
    return repaired


def downgrade(eng, revision: str) -> None:
    if revision != "base" and revision not in revisions():
        raise EngineError(f"unknown revision {revision!r}; use one of base, {', '.join(revisions())} "
                          "(`engine db current` shows where the database is)")
    check_known(current(eng))
    with eng.begin() as conn:
        _alembic(command.downgrade, conn, revision)
    if revision != "base":
        roles.reapply(eng)  # a restored procedure is a new definition without grants


def current(eng) -> str | None:
    with eng.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head() -> str:
    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
