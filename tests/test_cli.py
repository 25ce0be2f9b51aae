"""The command line end to end, through real subprocesses, and every bad input of issue 2."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


GOOD = """
from engine import DAG, BashTask

with DAG("good", max_active_tasks=2):
    a = BashTask("a", bash_command="echo a > a.out")
    b = BashTask("b", bash_command="echo b", retries=1, retry_delay=0)
    a >> b
"""


def engine(db_url, *args, cwd=None, env=None, timeout=120):
    # The tests sync folders under the temporary directory: "/" is their DAGs folder.
    full_env = {**os.environ, "ENGINE_DATABASE_URL": db_url, "ENGINE_DAGS_FOLDER": "/", **(env or {})}
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=timeout)


def assert_one_line_error(result, *needles):
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in result.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture
def dags_dir(tmp_path) -> Path:
    d = tmp_path / "dags"
    d.mkdir()
    (d / "good.py").write_text(GOOD)
    return d


def test_sync_trigger_tick_worker_status(db_url, dags_dir, tmp_path):
    env = {"ENGINE_HOME": str(tmp_path / "home")}
    r = engine(db_url, "dags", "sync", str(dags_dir), env=env)
    assert r.returncode == 0 and "synced 1 DAG(s): good" in r.stdout, r.stderr
    r = engine(db_url, "dags", "trigger", "good", "--conf", '{"x": 1}', "--run-id", "r1", env=env)
    assert r.returncode == 0 and "r1" in r.stdout, r.stderr
    for _ in range(6):
        r = engine(db_url, "tick", "--json", env=env)
        assert r.returncode == 0, r.stderr
        summary = json.loads(r.stdout)
        assert {"runs_created", "tis_scheduled", "tis_queued", "runs_finished", "duration_ms"} <= summary.keys()
        r = engine(db_url, "worker", "--burst", env=env)
        assert r.returncode == 0, r.stderr
        if sql_state(db_url) == "success":
            break
    assert sql_state(db_url) == "success"
    assert (dags_dir / "a.out").read_text().strip() == "a"  # bash ran in the DAG's folder
    logs = list((tmp_path / "home" / "logs").rglob("*.log"))
    assert len(logs) == 2
    r = engine(db_url, "status", "--json", env=env)
    status = json.loads(r.stdout)
    assert status["recent runs"][0]["state"] == "success"
    assert {p["pool"] for p in status["pools"]} == {"default_pool"}
    r = engine(db_url, "status", env=env)
    assert "== pools" in r.stdout and "default_pool" in r.stdout


def test_missing_postgresql_database_is_told_apart_in_any_language(pg_server, monkeypatch):
    """psycopg gives a failed connection no SQLSTATE, and the server's line is in its lc_messages'
    language: where the English text is not there, the server's catalog is asked (through its
    maintenance database). Here the English pattern is taken away, as on a German server."""
    import re

    import psycopg
    import sqlalchemy as sa

    from engine import db
    from tests.conftest import _url

    conn = dict(host=pg_server.host, port=pg_server.port, user=pg_server.user, password=pg_server.password)

    def failure(name):
        with pytest.raises(sa.exc.OperationalError) as err:
            sa.create_engine(_url(conn, name)).connect()
        return err.value

    missing = failure("engine_no_such_database")
    admin = psycopg.connect(_url(conn, "postgres").replace("postgresql+psycopg", "postgresql"), autocommit=True)
    admin.execute("DROP DATABASE IF EXISTS engine_closed_db")
    admin.execute("CREATE DATABASE engine_closed_db")
    admin.execute("ALTER DATABASE engine_closed_db ALLOW_CONNECTIONS false")
    try:
        closed = failure("engine_closed_db")   # names the database; it exists
        monkeypatch.setattr(db, "_NO_DATABASE", re.compile(r"(?!)"))
        assert db.is_missing_database(missing)
        assert "does not exist" in str(db.describe_connect_error(_url(conn, "engine_no_such_database"), missing))
        assert not db.is_missing_database(closed)
        assert "unreachable" in str(db.describe_connect_error(_url(conn, "engine_closed_db"), closed))
    finally:
        admin.execute("DROP DATABASE IF EXISTS engine_closed_db")
        admin.close()


def test_missing_database_is_one_line_and_db_upgrade_creates_it_on_mysql(db_url, dialect):
    import sqlalchemy as sa
    missing = sa.engine.make_url(db_url).set(database=sa.engine.make_url(db_url).database + "_missing")
    url = missing.render_as_string(hide_password=False)
    r = engine(url, "dags", "list")
    assert_one_line_error(r, "does not exist")
    if dialect != "mysql":
        # PostgreSQL databases are made with createdb, and the line says so (psycopg gives a
        # failed connection no SQLSTATE: the hint used to be "start it", for any command, and
        # `engine db upgrade` said "check that the database is up").
        assert "createdb" in r.stderr, r.stderr
        r = engine(url, "db", "upgrade")
        assert_one_line_error(r, "does not exist", "createdb")
        return
    try:
        r = engine(url, "db", "upgrade")
        assert r.returncode == 0 and "created database" in r.stdout, r.stderr
        assert engine(url, "dags", "list").returncode == 0
    finally:
        admin = sa.create_engine(missing._replace(database=None))
        with admin.begin() as c:
            c.exec_driver_sql(f"DROP DATABASE IF EXISTS `{missing.database}`")
        admin.dispose()


def sql_state(db_url):
    import sqlalchemy as sa
    e = sa.create_engine(db_url)
    try:
        with e.connect() as c:
            return c.execute(sa.text("SELECT state FROM dag_run WHERE run_id = 'r1'")).scalar()
    finally:
        e.dispose()


def test_pools_and_dags_commands(db_url, dags_dir):
    assert engine(db_url, "pools", "set", "warehouse", "4", "--include-deferred").returncode == 0
    r = engine(db_url, "pools", "list")
    assert "warehouse" in r.stdout and "True" in r.stdout
    engine(db_url, "dags", "sync", str(dags_dir))
    r = engine(db_url, "dags", "pause", "good")
    assert r.returncode == 0 and "paused" in r.stdout
    assert "True" in engine(db_url, "dags", "list").stdout
    assert engine(db_url, "dags", "unpause", "good").returncode == 0
    assert "unlimited" in engine(db_url, "pools", "set", "wide", "-1").stdout
    assert engine(db_url, "pools", "delete", "warehouse").returncode == 0
    r = engine(db_url, "db", "check")
    assert r.returncode == 0 and "queue_tis_v1" in r.stdout
    r = engine(db_url, "config", "show")
    assert "database_url" in r.stdout and "env ENGINE_DATABASE_URL" in r.stdout


BAD_FILES = {
    "import": ("import no_such_module_here\n", ["no_such_module_here"]),
    "syntax": ("with DAG('x'):\n    BashTask('t', bash_command='true'\n", ["SyntaxError"]),
    "cycle": ("with DAG('cyc'):\n    a = BashTask('a', bash_command='true')\n    b = BashTask('b', bash_command='true')\n"
              "    a >> b >> a\n", ["cycle"]),
    "duplicate": ("with DAG('dup'):\n    BashTask('a', bash_command='true')\n    BashTask('a', bash_command='true')\n",
                  ["'a'"]),
    "unknown_pool": ("with DAG('up'):\n    BashTask('a', bash_command='true', pool='nope')\n",
                     ["unknown pool 'nope'", "engine pools set"]),
    "too_wide": ("with DAG('tw'):\n    BashTask('a', bash_command='true', pool='small', pool_slots=3)\n",
                 ["pool_slots=3", "small"]),
    "cron": ("with DAG('cr', schedule='61 * * * *', start_date='2026-01-01'):\n    BashTask('a', bash_command='true')\n",
             ["schedule"]),
    "zero_limit": ("with DAG('zl', max_active_tasks=0):\n    BashTask('a', bash_command='true')\n", ["max_active_tasks"]),
    "negative_limit": ("with DAG('nl'):\n    BashTask('a', bash_command='true', max_active_tis_per_dag=-1)\n",
                       ["max_active_tis_per_dag"]),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_dag_file_is_one_line_and_writes_nothing(db_url, dags_dir, case):
    assert engine(db_url, "pools", "set", "small", "2").returncode == 0
    assert engine(db_url, "dags", "sync", str(dags_dir)).returncode == 0
    before = sql_rows(db_url)
    # The good DAG changes too: the failed sync must not half-write it.
    (dags_dir / "good.py").write_text(GOOD.replace("max_active_tasks=2", "max_active_tasks=5"))
    source, needles = BAD_FILES[case]
    (dags_dir / f"bad_{case}.py").write_text("from engine import DAG, BashTask\n" + source)
    assert_one_line_error(engine(db_url, "dags", "sync", str(dags_dir)), *needles)
    assert sql_rows(db_url) == before


def sql_rows(db_url):
    import sqlalchemy as sa
    e = sa.create_engine(db_url)
    try:
        with e.connect() as c:
            return c.execute(sa.text("SELECT dag_id, max_active_tasks, (SELECT count(*) FROM task) FROM dag ORDER BY 1")).all()
    finally:
        e.dispose()


def test_bad_command_input(db_url, dags_dir):
    engine(db_url, "dags", "sync", str(dags_dir))
    assert_one_line_error(engine(db_url, "dags", "trigger", "good", "--conf", "{not json"), "--conf", "JSON")
    assert_one_line_error(engine(db_url, "dags", "trigger", "good", "--conf", "[1]"), "JSON object")
    assert_one_line_error(engine(db_url, "dags", "trigger", "nope"), "unknown DAG 'nope'", "engine dags list")
    assert_one_line_error(engine(db_url, "dags", "pause", "nope"), "unknown DAG 'nope'")
    assert engine(db_url, "dags", "trigger", "good", "--run-id", "same").returncode == 0
    assert_one_line_error(engine(db_url, "dags", "trigger", "good", "--run-id", "same"), "already has a run 'same'")
    assert_one_line_error(engine(db_url, "pools", "set", "p", "-5"), "slots must be from 1 to")
    assert_one_line_error(engine(db_url, "pools", "delete", "nope"), "unknown pool 'nope'")
    assert_one_line_error(engine(db_url, "pools", "delete", "default_pool"), "default_pool")
    assert_one_line_error(engine(db_url, "worker", "--concurrency", "0"), "--concurrency")
    assert_one_line_error(engine(db_url, "dags", "sync", str(dags_dir / "missing")), "missing")


def test_unreachable_database_is_one_line():
    for url in ("postgresql+psycopg://nobody@127.0.0.1:1/none", "mysql+pymysql://nobody@127.0.0.1:1/none"):
        r = engine(url, "dags", "list")
        assert_one_line_error(r, "unreachable", "ENGINE_DATABASE_URL")
    r = engine("notadb://x", "tick")
    assert_one_line_error(r, "notadb")


@pytest.mark.parametrize("orig", ["mysql-1213", "mysql-1205", "postgresql-40P01"])
def test_a_deadlock_is_one_line_that_says_to_run_the_command_again(orig, capsys):
    """A command that meets a deadlock or a lock wait timeout (a writer racing the MariaDB call
    that makes a skip entry, docs/critical-section.md) is told to run again, not to check that
    the database is up."""
    import psycopg
    import pymysql
    import sqlalchemy as sa

    from cli.common import handle_errors

    cause = {"mysql-1213": pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock; "
                                                              "try restarting transaction"),
             "mysql-1205": pymysql.err.OperationalError(1205, "Lock wait timeout exceeded; try restarting "
                                                              "transaction"),
             "postgresql-40P01": psycopg.errors.DeadlockDetected("deadlock detected")}[orig]

    @handle_errors
    def command():
        raise sa.exc.OperationalError("UPDATE task_instance ...", {}, cause)

    with pytest.raises(SystemExit) as exit_:
        command()
    assert exit_.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "run the command again" in lines[0] and "check that the database is up" not in lines[0]


NOWHERE = "postgresql+psycopg://nobody@127.0.0.1:1/none"  # options are checked before it is reached


@pytest.mark.parametrize("args", [("dags", "trigger", "man", "--logical-date", "0001-01-01T00:00+05:00"),
                                  ("dags", "trigger", "man", "--logical-date", "9999-12-31T23:00-05:00"),
                                  ("dags", "backfill", "man", "--start", "2026-01-01", "--end", "9999-12-31T23:00-05:00")])
def test_a_date_whose_offset_leaves_python_s_range_is_out_of_range(args):
    """astimezone(utc) of year 1 at +05:00 (or 9999-12-31 at -05:00) overflows: the same line as
    any other date out of range, not a traceback."""
    assert_one_line_error(engine(NOWHERE, *args), "is out of range", "use a date from 1970-01-01 to 2999-12-31")


def test_an_empty_queues_option_is_refused_like_commas():
    for queues in ("", ",,"):
        assert_one_line_error(engine(NOWHERE, "worker", "--burst", "--queues", queues), "--queues names no queue")


def test_a_config_file_not_utf8_or_with_a_huge_number_is_one_line(tmp_path):
    from engine.config import load_config
    from engine.errors import EngineError

    cases = {"max_tis = 5\n".encode() + b"\xff\xfe\n": "not UTF-8 (byte 0xff at offset 12); save it as UTF-8",
             f"scheduler_interval = 1{'0' * 400}\n".encode(): "scheduler_interval from ",  # int too large for a float
             f"max_tis = 1{'0' * 5000}\n".encode(): "5001 digits; fix the TOML"}
    for text, needle in cases.items():
        path = tmp_path / "engine.toml"
        path.write_bytes(text)
        with pytest.raises(EngineError, match=re.escape(needle)) as err:
            load_config({}, path)
        assert "\n" not in str(err.value) and str(path) in str(err.value)
    (tmp_path / "big.toml").write_text(f"scheduler_interval = 1{'0' * 400}\n")
    r = engine(NOWHERE, "--config", str(tmp_path / "big.toml"), "config", "show")
    assert_one_line_error(r, "is out of range; use a number more than 0 and at most 3600")


@pytest.mark.parametrize("url, needle", [
    ("postgresql://u@[::1", "is not valid"),
    ("mysql+pymysql://root@127.0.0.1:1/../x", "names database '../x'"),
    ("mysql+pymysql://root@127.0.0.1:1/..", "names database '..'"),
    ("mysql+pymysql://root@127.0.0.1:1/a%60b", "names database 'a`b'"),
    ("mysql+pymysql://root@127.0.0.1:1/a%5Cb", "names database 'a\\\\b'"),
    ("mysql+pymysql://root@127.0.0.1:1/a%00b", "names database 'a\\x00b'"),
    ("postgresql+psycopg://u:secret@127.0.0.1:1/x%00", "names database 'x\\x00'"),
])
def test_a_malformed_url_or_unsafe_database_name_is_one_line(url, needle):
    """`engine db upgrade` used to create a MariaDB database named '../x'; a URL that does not
    parse printed a traceback."""
    r = engine(url, "db", "upgrade")
    assert_one_line_error(r, needle)
    assert "secret" not in r.stderr
    # `engine tick` (engine.lite, without SQLAlchemy) leaves such a name to the same check
    # rather than connecting with it.
    from engine import lite
    if "names database" in needle:
        assert lite.open(url) is None
    r = engine(url, "tick")
    assert_one_line_error(r, needle)


def test_database_names_the_servers_accept_are_kept():
    from engine import db

    for url in ("mysql+pymysql://root@127.0.0.1:3306/Engine-Prod_1", "postgresql+psycopg://u@h/../x",
                "postgresql+psycopg://u@h/My DB.v2", "mysql+pymysql://root@127.0.0.1:3306"):
        db.make_engine(url).dispose()


def _one_error_line(command, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        command()
    assert exit_.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_a_check_constraint_or_a_statement_timeout_is_not_told_as_an_outage(eng, dialect, capsys):
    """MariaDB's 4025 (a CHECK constraint, e.g. JSON_VALID) and a cancelled statement (57014,
    1969) arrive as OperationalError: they name what happened, not "check that the database is up"."""
    import sqlalchemy as sa

    from cli.common import handle_errors
    from engine import db

    def check_failure():
        with eng.begin() as c:
            c.exec_driver_sql("CREATE TEMPORARY TABLE IF NOT EXISTS chk (j TEXT CHECK (j <> 'bad'))")
            c.exec_driver_sql("INSERT INTO chk VALUES ('bad')")

    def timeout():
        with eng.begin() as c:
            if dialect == "postgresql":
                c.exec_driver_sql("SET LOCAL statement_timeout = 10")
                c.exec_driver_sql("SELECT pg_sleep(5)")
            else:
                c.exec_driver_sql("SET STATEMENT max_statement_time = 0.05 FOR SELECT SLEEP(5)")

    for fn, needle in ((check_failure, "CONSTRAINT" if dialect == "mysql" else "violates check constraint"),
                       (timeout, "took longer than its time limit")):
        with pytest.raises(sa.exc.DBAPIError) as err:
            fn()
        assert not db.is_unreachable(err.value) and not db.is_transient(err.value)  # services: as before
        line = _one_error_line(handle_errors(fn), capsys)
        assert needle in line and "check that the database is up" not in line, line


def test_text_the_driver_cannot_encode_is_one_line(eng, capsys):
    """The safety net behind validate's UTF-8 checks: a lone surrogate reaching the driver."""
    import sqlalchemy as sa

    from cli.common import handle_errors

    @handle_errors
    def command():
        with eng.begin() as c:
            c.execute(sa.text("SELECT :x"), {"x": "bad\udcff"})

    line = _one_error_line(command, capsys)
    assert "'\\udcff'" in line and "UTF-8" in line, line
