"""Alembic driven from code: `engine db upgrade | downgrade | current`."""
from __future__ import annotations

import re
from contextlib import contextmanager

from engine import db, dbtriggers, procedures
from engine.errors import EngineError
from engine.paths import MIGRATIONS_DIR

# Alembic is imported where it is used: `engine tick` checks the schema with head_fast().
_REVISION = re.compile(r"^(down_revision|revision)\s*=\s*(?:None|[\"']([^\"']+)[\"'])\s*(?:#.*)?$", re.M)


def alembic_config(conn):
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = conn
    return cfg


def revisions() -> list[str]:
    """Every revision this engine knows, oldest first."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(MIGRATIONS_DIR))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def check_known(current: str | None) -> None:
    """Refuse a database migrated by a newer release than this engine (one line)."""
    if current is not None and current not in revisions():
        raise EngineError(f"database schema is at revision {current}, which this engine (newest revision {head()}) "
                          "does not know: a newer release migrated it; run that release's engine")


def _alembic(fn, conn, revision: str) -> None:
    from alembic.util.exc import CommandError

    try:
        fn(alembic_config(conn), revision)
    except CommandError as exc:
        raise EngineError(f"cannot migrate to {revision!r}: {' '.join(str(exc).split())}; known revisions: base, "
                          f"{', '.join(revisions())}") from None


MIGRATE_LOCK_WAIT = 600.0  # seconds a migration waits for another one of the same database


@contextmanager
def migration_lock(eng, wait: float | None = None):
    """The lock of migrations (named query migrate_lock), held on a connection of its own until the
    block ends: a second upgrade or downgrade of the same deployment waits for the first, then reads
    the revision again. One line after `wait` seconds (default MIGRATE_LOCK_WAIT)."""
    wait = MIGRATE_LOCK_WAIT if wait is None else wait
    busy = EngineError(f"another `engine db upgrade` or `engine db downgrade` of this database has held the "
                       f"migration lock for {wait:g} s; let it end, then run this again")
    conn = eng.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        try:
            taken = db.run(conn, "migrate_lock", wait_ms=str(max(1, round(wait * 1000))),
                           wait_s=max(0.001, wait)).scalar()
        except db.dbapi_errors() as exc:
            if db.is_lock_busy(exc):
                raise busy from None
            raise
        if not taken:
            raise busy
        try:
            yield
        finally:
            db.run(conn, "migrate_unlock")
    finally:
        conn.invalidate()  # (the session's lock_timeout goes with it, and any lock left)
        conn.close()


def upgrade(eng, revision: str = "head") -> list[str]:
    """Migrate to ``revision`` and, at head, reinstall drifted or missing objects and make drifted or
    missing triggers again (engine/dbtriggers.py). Returns the repaired names. Under the lock of
    migrations: a second upgrade at the same moment waits, then finds nothing left to do."""
    if eng.dialect.name == "postgresql":
        db.ensure_database(eng)  # the schema of setting `schema` (MySQL: `engine db upgrade` creates the database)
    with migration_lock(eng):
        return _upgrade(eng, revision)


def _upgrade(eng, revision: str) -> list[str]:
    from alembic import command

    check_known(current(eng))
    with eng.begin() as conn:
        _alembic(command.upgrade, conn, revision)
    repaired: list[str] = []
    if revision == "head":
        with eng.begin() as conn:
            repaired = procedures.repair(conn)
            repaired += dbtriggers.repair(conn)  # (after the procedures: a trigger may call one)
        from engine import roles

        roles.reapply(eng)  # reinstalled and new procedures get their grants back
    return repaired


def downgrade(eng, revision: str) -> None:
    if revision != "base" and revision not in revisions():
        raise EngineError(f"unknown revision {revision!r}; use one of base, {', '.join(revisions())} "
                          "(`engine db current` shows where the database is)")
    from alembic import command

    with migration_lock(eng):
        check_known(current(eng))
        with eng.begin() as conn:
            _alembic(command.downgrade, conn, revision)
    if revision != "base":
        from engine import roles

        roles.reapply(eng)  # a restored procedure is a new definition without grants


def current(eng) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with eng.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()


def head_fast() -> str | None:
    """head() without Alembic: the one revision of migrations/versions that no other names as
    its down_revision, read from the files' plain `revision = "..."` lines; None when the files
    do not say it that plainly (then the caller asks Alembic)."""
    revs, downs = set(), set()
    for path in MIGRATIONS_DIR.glob("versions/*.py"):
        if path.name == "__init__.py":
            continue
        found = dict(_REVISION.findall(path.read_text()))
        if not found.get("revision") or "down_revision" not in found:
            return None
        revs.add(found["revision"])
        downs.add(found["down_revision"])
    heads = revs - downs
    return heads.pop() if len(heads) == 1 else None
