"""The schema the migrations build is what the sql/ files describe; drift is found and repaired."""
from __future__ import annotations

import re

import pglast
import pytest
import sqlalchemy as sa

from engine import migrate, procedures
from engine.paths import SQL_DIR
from tests.helpers import run_sql_file

PG_FILES = sorted((SQL_DIR / "postgresql").rglob("*.sql"))


@pytest.mark.parametrize("path", PG_FILES, ids=lambda p: str(p.relative_to(SQL_DIR)))
def test_every_postgresql_file_parses(path):
    text = path.read_text()
    if path.parent.name == "queries":
        text = re.sub(r"(?<!:):\w+", "NULL", text)  # named parameters
    assert pglast.parse_sql(text)


@pytest.mark.parametrize("dialect_dir", ["postgresql", "mysql"])
def test_each_object_file_defines_the_object_it_is_named_after(dialect_dir):
    for name in procedures.expected_objects(dialect_dir):
        path = procedures.object_file(dialect_dir, name)
        assert procedures.object_kind(dialect_dir, name, path.read_text()) in ("function", "procedure", "view")


def test_both_dialects_have_the_same_objects_and_named_queries():
    """Same names, same versions: every object and named statement exists for both dialects."""
    def names(folder):
        return sorted(p.name for p in folder.glob("*.sql"))
    assert names(SQL_DIR / "mysql") == names(SQL_DIR / "postgresql")
    assert names(SQL_DIR / "mysql" / "queries") == names(SQL_DIR / "postgresql" / "queries")


def _routines(dialect: str) -> set[str]:
    return {n for n in procedures.expected_objects(dialect)
            if procedures.object_kind(dialect, n, procedures.object_file(dialect, n).read_text()) != "view"}


def test_migrated_database_holds_exactly_what_sql_files_describe(eng):
    with eng.begin() as conn:
        dialect = procedures.dialect_of(conn)
        findings = procedures.check(conn)
        assert {f.name for f in findings} == set(procedures.expected_objects(dialect))
        assert [f for f in findings if f.status != "ok"] == []
        # Nothing else engine-made is installed: every function / procedure of the schema is expected.
        assert procedures.installed_routines(conn) == _routines(dialect)


def test_hand_edit_is_reported_as_drift_and_upgrade_repairs_it(eng):
    run_sql_file(eng, "hand_edit_heartbeat")
    with eng.begin() as conn:
        conn.execute(sa.text("DROP VIEW pool_usage"))
    with eng.begin() as conn:
        status = {f.name: f.status for f in procedures.check(conn)}
    assert status["heartbeat_v1"] == "drifted"
    assert status["pool_usage"] == "missing"
    assert sorted(migrate.upgrade(eng)) == ["heartbeat_v1", "pool_usage"]
    with eng.begin() as conn:
        assert all(f.status == "ok" for f in procedures.check(conn))


def test_downgrade_to_base_and_back(eng):
    migrate.downgrade(eng, "base")
    with eng.begin() as conn:
        assert not sa.inspect(conn).has_table("task_instance")
        assert procedures.installed_routines(conn) == set()
    migrate.upgrade(eng)
    assert migrate.current(eng) == migrate.head()


def _recorded_objects_intact(conn) -> None:
    """Every object procedure_version records is installed as recorded, and no routine is
    installed that it does not record."""
    dialect = procedures.dialect_of(conn)
    rows = conn.execute(sa.text("SELECT name, kind, db_checksum FROM procedure_version")).all()
    for r in rows:
        assert procedures.db_checksum(conn, dialect, r.name, r.kind) == r.db_checksum, r.name
    assert procedures.installed_routines(conn) == {r.name for r in rows if r.kind != "view"}


def test_walk_down_and_up_one_revision_at_a_time(eng):
    """Each downgrade leaves exactly what its target revision installed (views changed in place
    get their previous text back); each upgrade step likewise; head is clean at the end."""
    revisions = migrate.revisions()
    for target in list(reversed(revisions))[1:] + ["base"]:
        migrate.downgrade(eng, target)
        with eng.begin() as conn:
            if target == "base":
                assert not sa.inspect(conn).has_table("procedure_version")
                assert procedures.installed_routines(conn) == set()
            else:
                _recorded_objects_intact(conn)
    for target in revisions:
        migrate.upgrade(eng, target)
        with eng.begin() as conn:
            _recorded_objects_intact(conn)
    with eng.begin() as conn:
        assert [f for f in procedures.check(conn) if f.status != "ok"] == []


def test_db_check_on_an_empty_database_says_to_upgrade(db_url):
    import subprocess
    import sys

    from engine import db
    eng = db.make_engine(db_url)
    migrate.downgrade(eng, "base")
    eng.dispose()
    r = subprocess.run([sys.executable, "-m", "cli.main", "--database-url", db_url, "db", "check"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.strip() == "error: the database has no engine schema yet; run `engine db upgrade`"


def test_db_check_reports_extra_overloads_and_routines_no_migration_installed(eng):
    run_sql_file(eng, "extra_routines")
    with eng.begin() as conn:
        found = {(f.name, f.status) for f in procedures.check(conn) if f.status != "ok"}
    expected = {("dba_helper", "unexpected")}
    if eng.dialect.name == "postgresql":
        expected.add(("heartbeat_v1", "extra-overload"))
    assert found == expected
    migrate.upgrade(eng)  # repair reinstalls what drifted; it never drops a DBA's routine
    with eng.begin() as conn:
        assert {(f.name, f.status) for f in procedures.check(conn) if f.status != "ok"} == expected


def test_sql_lint_reads_plpgsql_bodies_and_names(tmp_path):
    """`engine sql lint` passes the shipped files and reports, as file:line: message, a body
    that does not parse (the outer CREATE FUNCTION still parses) and a misnamed MySQL object."""
    import shutil

    from click.testing import CliRunner

    from cli.main import main as engine_cli

    ok = CliRunner().invoke(engine_cli, ["sql", "lint"])
    assert ok.exit_code == 0 and "PL/pgSQL bodies parse" in ok.output, ok.output
    root = tmp_path / "sql"
    shutil.copytree(SQL_DIR, root)
    pg = root / "postgresql" / "heartbeat_v1.sql"
    pg.write_text(pg.read_text().replace("    UPDATE job SET", "    SELEC nonsense FRM nowhere;\n    UPDATE job SET", 1))
    assert pglast.parse_sql(pg.read_text())  # only the body is wrong
    (root / "mysql" / "queue_tis_v9.sql").write_text("CREATE PROCEDURE queue_tis_v8()\nBEGIN\nEND")
    bad = CliRunner().invoke(engine_cli, ["sql", "lint", str(root)])
    assert bad.exit_code == 1
    line = next(n for n, text in enumerate(pg.read_text().splitlines(), 1) if "SELEC" in text)
    assert f"{pg}:{line}: PL/pgSQL body of heartbeat_v1: syntax error at or near \"SELEC\"" in bad.stdout
    assert "queue_tis_v9.sql defines queue_tis_v8" in bad.stdout
    assert re.fullmatch(r"error: 2 problem\(s\) in 2 of \d+ SQL file\(s\)", bad.stderr.strip()), bad.stderr
