"""Alembic driven from code: `engine db upgrade | downgrade | current`."""
from __future__ import annotations

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from engine import procedures
from engine.paths import MIGRATIONS_DIR


def alembic_config(conn) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = conn
    return cfg


def upgrade(eng, revision: str = "head") -> list[str]:
    """Migrate to ``revision`` and reinstall drifted or missing objects. Returns repaired names."""
    with eng.begin() as conn:
        command.upgrade(alembic_config(conn), revision)
    repaired: list[str] = []
    if revision == "head":
        with eng.begin() as conn:
            repaired = procedures.repair(conn)
    return repaired


def downgrade(eng, revision: str) -> None:
    with eng.begin() as conn:
        command.downgrade(alembic_config(conn), revision)


def current(eng) -> str | None:
    with eng.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head() -> str:
    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
