"""The schema the migrations build is what the sql/ files describe; drift is found and repaired."""
from __future__ import annotations

import re

import pglast
import pytest
import sqlalchemy as sa

from engine import migrate, procedures
from engine.paths import SQL_DIR

PG_FILES = sorted((SQL_DIR / "postgresql").rglob("*.sql"))


@pytest.mark.parametrize("path", PG_FILES, ids=lambda p: str(p.relative_to(SQL_DIR)))
def test_every_postgresql_file_parses(path):
    text = path.read_text()
    if path.parent.name == "queries":
        text = re.sub(r"(?<!:):\w+", "NULL", text)  # named parameters
    assert pglast.parse_sql(text)


def test_each_object_file_defines_the_object_it_is_named_after():
    for name in procedures.expected_objects("postgresql"):
        path = procedures.object_file("postgresql", name)
        assert procedures.object_kind("postgresql", name, path.read_text()) in ("function", "view")


def test_migrated_database_holds_exactly_what_sql_files_describe(eng):
    with eng.begin() as conn:
        findings = procedures.check(conn)
        assert {f.name for f in findings} == set(procedures.expected_objects("postgresql"))
        assert [f for f in findings if f.status != "ok"] == []
        # Nothing else engine-made is installed: every function of the schema is expected.
        installed = set(conn.execute(sa.text(
            "SELECT proname FROM pg_proc WHERE pronamespace = current_schema()::regnamespace")).scalars())
        assert installed == {n for n in procedures.expected_objects("postgresql")
                             if procedures.object_kind("postgresql", n, procedures.object_file("postgresql", n).read_text()) == "function"}


def test_hand_edit_is_reported_as_drift_and_upgrade_repairs_it(eng):
    with eng.begin() as conn:
        conn.execute(sa.text("CREATE OR REPLACE FUNCTION heartbeat_v1(p_job_id bigint, p_now timestamptz DEFAULT NULL) "
                             "RETURNS boolean LANGUAGE sql AS 'SELECT true'"))
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
        assert conn.execute(sa.text("SELECT to_regclass('task_instance')")).scalar() is None
        assert conn.execute(sa.text("SELECT count(*) FROM pg_proc WHERE proname LIKE '%\\_v1'")).scalar() == 0
    migrate.upgrade(eng)
    assert migrate.current(eng) == migrate.head()
