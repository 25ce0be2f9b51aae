"""A database connection without SQLAlchemy, for `engine tick`, whose cost is its start-up.

Importing SQLAlchemy (and Alembic for the schema check) takes several times the ~60 ms of
database work an idle scheduling pass does, so a tick from cron talks to the driver (psycopg,
PyMySQL) directly through this small stand-in for the few parts of SQLAlchemy's engine and
connection that engine.db, engine.jobs, engine.calls and engine.scheduler use: `connect()`,
`begin()`, `execute()` of a named statement (engine.db.run), results with `one()`, `all()`,
`scalar_one()`..., and the execution options that carry the procedure versions (engine.calls).

It opens the connection the way engine.db.make_engine's engine would (MySQL/MariaDB: the same
connect arguments, READ COMMITTED, FOUND_ROWS; PostgreSQL: the schema's search_path), keeps one
connection for the whole command, and raises DriverError (with `.orig`, as SQLAlchemy's
DBAPIError) so engine.db's error helpers treat both alike. A URL it does not understand (query
arguments other than the plain ones below) gets None from `open()`: the caller uses SQLAlchemy.
"""
from __future__ import annotations

import json
import re
from collections import namedtuple
from types import SimpleNamespace
from urllib.parse import parse_qsl, unquote, urlsplit

from engine import db

# URL query arguments passed to the driver as they are (anything else: SQLAlchemy decides).
PLAIN_QUERY = {"postgresql": {"host", "port", "sslmode", "sslrootcert", "sslcert", "sslkey", "application_name",
                              "connect_timeout", "options"},
               "mysql": {"charset", "unix_socket"}}
# sa.text()'s bind parameter syntax: ':name', not '::' casts, '\:' for a literal colon.
_BIND = re.compile(r"(?<![:\w\\]):(\w+)(?!:)")


class DriverError(Exception):
    """A driver's error, wrapped as SQLAlchemy wraps it (`.orig`)."""
    connection_invalidated = False

    def __init__(self, orig: BaseException):
        super().__init__(str(orig))
        self.orig = orig


class DriverOperationalError(DriverError):
    """The driver's OperationalError or InterfaceError (what SQLAlchemy raises as its own)."""


def pyformat(text: str) -> str:
    """sa.text() syntax (':name') as the drivers' pyformat ('%(name)s')."""
    return _BIND.sub(r"%(\1)s", text.replace("%", "%%")).replace("\\:", ":")


def open(url: str, schema: str | None = None) -> "Engine | None":
    """An Engine for the SQLAlchemy URL `url`, or None when it needs SQLAlchemy to connect."""
    dialect = "mysql" if db.is_mysql_url(url) else "postgresql"
    try:
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query, strict_parsing=False))
        driver = parts.scheme.split("+", 1)[1] if "+" in parts.scheme else None
        port = parts.port
    except ValueError:
        return None
    if driver != ("pymysql" if dialect == "mysql" else "psycopg") or not set(query) <= PLAIN_QUERY[dialect] \
            or "," in (parts.hostname or "") or "[" in parts.netloc:
        return None
    kwargs = {k: v for k, v in (("user", parts.username), ("password", parts.password),
                                ("host", parts.hostname), ("port", port)) if v is not None}
    kwargs = {k: unquote(v) if isinstance(v, str) else v for k, v in kwargs.items()}
    database = unquote(parts.path.lstrip("/")) or None
    if not db.safe_database_name(database, dialect == "mysql"):
        return None  # (a name the server cannot safely hold: SQLAlchemy's path refuses it in one line)
    if schema:
        db.check_schema(schema)
    if dialect == "mysql":
        database = schema or database
        kwargs.update(query, database=database, **db.mysql_connect_args())
    else:
        kwargs.update(query, dbname=database, options=db.pg_options(query.get("options"), schema))
    return Engine(url, dialect, {k: v for k, v in kwargs.items() if v is not None}, schema)


class _Url:
    """What engine.db reads of an engine's URL (to name it in a connection error)."""

    def __init__(self, text: str):
        self.text = text

    def render_as_string(self, hide_password: bool = True) -> str:
        return self.text  # engine.db.describe_connect_error hides the password itself


class Engine:
    lite = True

    def __init__(self, url: str, dialect: str, kwargs: dict, schema: str | None, options: dict | None = None,
                 shared=None):
        self.dialect = SimpleNamespace(name=dialect)
        self.url = _Url(url)
        self._kwargs = kwargs
        self._options = dict(options or {}, **({"engine_schema": schema} if schema else {}))
        self._shared = shared if shared is not None else SimpleNamespace(dbapi=None)

    def execution_options(self, **more) -> "Engine":
        return Engine(self.url.text, self.dialect.name, self._kwargs, None, {**self._options, **more}, self._shared)

    def get_execution_options(self) -> dict:
        return dict(self._options)

    def _dbapi(self):
        if self._shared.dbapi is None:
            try:
                if self.dialect.name == "mysql":
                    import pymysql
                    from pymysql.constants import CLIENT

                    raw = pymysql.connect(client_flag=CLIENT.FOUND_ROWS, autocommit=False, **self._kwargs)
                    with raw.cursor() as cur:  # what the engine's isolation_level="READ COMMITTED" does
                        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                else:
                    import psycopg

                    raw = psycopg.connect(autocommit=False, **self._kwargs)
            except Exception as exc:
                raise _wrap(exc) from exc
            self._shared.dbapi = raw
        return self._shared.dbapi

    def connect(self) -> "Connection":
        return Connection(self, self._dbapi())

    def invalidate(self) -> None:
        raw, self._shared.dbapi = self._shared.dbapi, None
        if raw is not None:
            try:
                raw.close()
            except Exception:  # noqa: BLE001 - a broken connection may refuse to close
                pass

    def dispose(self) -> None:
        self.invalidate()


def _wrap(exc: BaseException) -> DriverError:
    # DB-API names, as SQLAlchemy sorts them (psycopg's LockNotAvailable is an OperationalError)
    operational = {c.__name__ for c in type(exc).__mro__} & {"OperationalError", "InterfaceError"}
    return (DriverOperationalError if operational else DriverError)(exc)


class Connection:
    lite = True

    def __init__(self, eng: Engine, raw):
        self.engine, self.raw = eng, raw
        self.dialect = eng.dialect

    def get_execution_options(self) -> dict:
        return self.engine.get_execution_options()

    def begin(self) -> "Connection":
        return self

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            (self.raw.rollback if exc_type else self.raw.commit)()
        except Exception as failed:  # noqa: BLE001 - the connection is gone: the next connect() opens another
            self.engine.invalidate()
            if exc_type is None:
                raise _wrap(failed) from failed
        return False

    def close(self) -> None:
        pass  # the one connection stays open for the next step (Engine.dispose closes it)

    def execute(self, statement: "Statement", params: dict | None = None) -> "Result":
        try:
            cur = self.raw.cursor()
            try:
                cur.execute(statement.text, params or None)
                rows = cur.fetchall() if cur.description else []
                keys = [d[0] for d in cur.description or ()]
                if self.dialect.name == "mysql":
                    while cur.nextset():  # a CALL's trailing status
                        pass
            finally:
                cur.close()
        except Exception as exc:
            wrapped = _wrap(exc)
            if isinstance(wrapped, DriverOperationalError) and db.is_unreachable(wrapped):
                self.engine.invalidate()
            raise wrapped from exc
        return Result(keys, [statement.convert(keys, r) for r in rows])


class Statement:
    """One named statement: the driver's text and the result types of its header (MySQL)."""

    def __init__(self, text: str, types: dict, dialect: str):
        self.text = pyformat(text)
        self.types = types if dialect == "mysql" else {}

    def convert(self, keys, row) -> tuple:
        if not self.types:
            return tuple(row)
        return tuple(_convert(self.types.get(k), v) for k, v in zip(keys, row))


def _convert(kind, value):
    if value is None or kind is None:
        return value
    if kind == "bool":
        return bool(value)
    return json.loads(value) if isinstance(value, (str, bytes)) else value


class Result:
    """The parts of SQLAlchemy's Result the engine's callers use."""

    def __init__(self, keys: list, rows: list):
        self._keys = keys
        row = namedtuple("Row", keys, rename=True) if keys else tuple
        self._rows = [row(*r) for r in rows] if keys else []

    def keys(self) -> list:
        return list(self._keys)

    def __iter__(self):
        return iter(self._rows)

    def all(self) -> list:
        return list(self._rows)

    def first(self):
        return self._rows[0] if self._rows else None

    def one(self):
        if len(self._rows) != 1:
            raise db.EngineError(f"expected one row, got {len(self._rows)}")
        return self._rows[0]

    def scalar(self):
        return self._rows[0][0] if self._rows else None

    def scalar_one(self):
        return self.one()[0]

    def scalars(self) -> list:
        return [r[0] for r in self._rows]
