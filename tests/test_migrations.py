"""The schema the migrations build is what the sql/ files describe; drift is found and repaired."""
from __future__ import annotations

import datetime as dt
import re

import pglast
import pytest
import sqlalchemy as sa

from engine import db, dbtriggers, migrate, procedures
from engine.errors import EngineError
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


# Objects of one dialect only, each with its dialect and the reason (each file says it too).
# stamp_scheduled_v2: only MySQL/MariaDB's writers read their pool's skip entry (PostgreSQL's
# stamp a transaction id and read nothing), and only that read changed (revision 0043).
# track_usage_v2: only MySQL/MariaDB's TI triggers read a pool's flag by a plain read (revision
# 0044; PostgreSQL's pool trigger waits for the TI writers instead, track_pool_usage_v2).
# heartbeat_v4: only MySQL/MariaDB's heartbeat_v3 picked its TIs by a plain read (revision 0046).
# heartbeat_v5: only MySQL/MariaDB's heartbeat_v4 moved TIs by a second read (revision 0056).
# clear_tis_v3: only PostgreSQL's clear_tis_v2 read a TI's worker from its cursor's snapshot (0047).
# clear_tis_v4, set_ti_state_v3, set_run_state_v3: only MySQL/MariaDB's operator commands locked
# rows their multi-table statements read outside the selection (0060).
DIALECT_ONLY: dict[str, str] = {"stamp_scheduled_v2.sql": "mysql", "track_usage_v2.sql": "mysql",
                                "heartbeat_v4.sql": "mysql", "heartbeat_v5.sql": "mysql",
                                "fold_usage_v2.sql": "mysql", "clear_tis_v3.sql": "postgresql",
                                "clear_tis_v4.sql": "mysql", "set_ti_state_v3.sql": "mysql",
                                "set_run_state_v3.sql": "mysql"}


def test_both_dialects_have_the_same_objects_and_named_queries():
    """Same names, same versions: every object and named statement exists for both dialects
    (but DIALECT_ONLY's, each in its dialect)."""
    def names(folder):
        return sorted(p.name for p in folder.glob("*.sql") if p.name not in DIALECT_ONLY)
    assert names(SQL_DIR / "mysql") == names(SQL_DIR / "postgresql")
    for name, dialect in DIALECT_ONLY.items():
        assert (SQL_DIR / dialect / name).exists()
        assert not (SQL_DIR / ("mysql" if dialect == "postgresql" else "postgresql") / name).exists()
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


def test_checksums_read_together_equal_each_read_alone(eng):
    """procedures.db_checksums (one query per kind: `engine db check`, downgrades) gives each
    object the checksum db_checksum gives it alone (what install records)."""
    with eng.begin() as conn:
        dialect = procedures.dialect_of(conn)
        held = procedures.db_checksums(conn, dialect)
        kinds = dict(conn.execute(sa.text("SELECT name, kind FROM procedure_version")).all())
        assert {name for name, _ in held} == set(kinds) and len(held) == len(kinds)
        for (name, view), checksum in held.items():
            assert view == (kinds[name] == "view")
            assert procedures.db_checksum(conn, dialect, name, kinds[name]) == checksum, name


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


def test_a_fresh_upgrade_makes_exactly_the_triggers_db_triggers_txt_lists(eng):
    # From base, as a new deployment: the migrations alone must make every trigger of the file
    # (nothing for the repair to do; a stale file would be "repaired" here, and fail).
    migrate.downgrade(eng, "base")
    assert migrate.upgrade(eng) == []
    with eng.begin() as conn:
        dialect = procedures.dialect_of(conn)
        assert dbtriggers.actual(conn) == dbtriggers.expected(dialect)
        assert {(f.name, f.status) for f in dbtriggers.check(conn)} == {
            (name, "ok") for name in dbtriggers.expected(dialect)}


def test_triggers_changed_disabled_dropped_or_added_by_hand_are_reported_and_upgrade_repairs_them(eng, db_url):
    import subprocess
    import sys

    run_sql_file(eng, "hand_edit_triggers")
    if eng.dialect.name == "postgresql":
        bad = {("usage_ti_update", "drifted"), ("usage_pool", "missing")}
    else:  # (made again last, usage_ti_update now fires after stamp_scheduled_update: both differ)
        bad = {("usage_ti_update", "drifted"), ("stamp_scheduled_update", "drifted"), ("usage_pool_delete", "missing")}
    with eng.begin() as conn:
        found = {(f.name, f.status) for f in dbtriggers.check(conn) if f.status != "ok"}
    assert found == bad | {("dba_audit", "unexpected")}
    r = subprocess.run([sys.executable, "-m", "cli.main", "--database-url", db_url, "db", "check"],
                       capture_output=True, text=True)
    assert r.returncode == 1
    lines = {tuple(line.split()[:2]) for line in r.stdout.splitlines()}
    assert bad | {("dba_audit", "unexpected")} <= lines
    assert sorted(set(migrate.upgrade(eng)) - {"dba_audit_fn"}) == sorted(name for name, _ in bad)
    with eng.begin() as conn:  # the DBA's own trigger is never dropped
        assert [(f.name, f.status) for f in dbtriggers.check(conn) if f.status != "ok"] == [("dba_audit", "unexpected")]
        assert {n: d for n, d in dbtriggers.actual(conn).items() if n != "dba_audit"} == \
            dbtriggers.expected(procedures.dialect_of(conn))


def test_a_trigger_repair_keeps_writers_out_while_a_trigger_is_missing(eng):
    # Between dropping a trigger and making it again, a TI written by a running service would not
    # be counted. Right after the repair drops each trigger that existed, a second connection
    # tries to write its table: it must wait (MySQL commits every DDL statement, so the repair
    # write-locks the tables; PostgreSQL's DROP TRIGGER locks the table to the end of the
    # transaction).
    from engine import db

    run_sql_file(eng, "hand_edit_triggers")
    writes = {"task_instance": "UPDATE task_instance SET state = state WHERE id = -1",
              "pool": "UPDATE pool SET slots = slots WHERE name = ''"}
    with eng.begin() as conn:
        dialect = procedures.dialect_of(conn)
        existed = set(dbtriggers.actual(conn))
    table_of = {name: re.search(r" ON (\w+) ", d).group(1) for name, d in dbtriggers.expected(dialect).items()}
    probed = {}

    def write_from_outside(table):
        with eng.connect() as other:
            other.exec_driver_sql("SET lock_timeout = '1s'" if dialect == "postgresql"
                                  else "SET SESSION lock_wait_timeout = 1")
            try:
                other.exec_driver_sql(writes[table])
                other.commit()
                return "written"
            except sa.exc.DBAPIError as exc:
                other.rollback()
                return "waited" if db.error_code(exc) in ("55P03", 1205) else repr(exc)

    class Probe:  # the repair's connection, looked at from outside after each DROP TRIGGER
        def __init__(self, conn):
            self.conn = conn

        def __getattr__(self, name):
            return getattr(self.conn, name)

        def exec_driver_sql(self, statement, *args):
            result = self.conn.exec_driver_sql(statement, *args)
            m = re.match(r"DROP TRIGGER IF EXISTS [`\"](\w+)[`\"]", statement)
            if m and m.group(1) in existed:
                probed[m.group(1)] = write_from_outside(table_of[m.group(1)])
            return result

    with eng.begin() as conn:
        assert "usage_ti_update" in dbtriggers.repair(Probe(conn))
    assert "usage_ti_update" in probed and set(probed.values()) == {"waited"}, probed
    with eng.begin() as conn:
        assert [(f.name, f.status) for f in dbtriggers.check(conn) if f.status != "ok"] == [("dba_audit", "unexpected")]


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
    held = procedures.db_checksums(conn, dialect)
    for r in rows:
        assert held.get((r.name, r.kind == "view")) == r.db_checksum, r.name
    assert procedures.installed_routines(conn) == {r.name for r in rows if r.kind != "view"}


@pytest.mark.parametrize("before", ["0034", "0042"])
def test_revisions_0035_and_0043_drop_the_skip_entries_made_before_them_on_mysql(eng, before):
    """queue_tis_v15-v17's entries could hide a TI (queue_tis_v18 fixed it), and so could any
    entry while writers read it as stamp_scheduled_v1 did (v2 fixed it): upgrading past 0035 and
    past 0043 leaves MySQL/MariaDB with none, to be made again by v18; PostgreSQL's stay."""
    migrate.downgrade(eng, before)
    pg = db.dialect_dir(eng) == "postgresql"
    with eng.begin() as c:
        c.execute(sa.text(f"INSERT INTO queue_skip (pool, b_pw, b_after, b_map, b_id{', seen_xmin' if pg else ''}) "
                          f"VALUES ('p', 1, :t, 0, 1{', 0' if pg else ''})"), {"t": dt.datetime(2026, 1, 1)})
        c.execute(sa.text("INSERT INTO queue_skip_part (pool, kind, dag_run_id) VALUES ('p', 'run', 1)"))
    migrate.upgrade(eng)
    with eng.connect() as c:
        left = (c.execute(sa.text("SELECT count(*) FROM queue_skip")).scalar(),
                c.execute(sa.text("SELECT count(*) FROM queue_skip_part")).scalar())
    assert left == ((1, 1) if pg else (0, 0))


def test_revision_0036_swaps_the_usage_triggers_while_writers_wait(eng):
    """MySQL/MariaDB: revision 0036 makes task_instance's usage triggers again (and its downgrade
    puts revision 0033's back) under a write lock of the table, so a TI written meanwhile from
    another connection is counted: usage_drift stays empty across repeated swaps. (Fails with
    the LOCK TABLES taken out: the writer's rows land between a DROP and its CREATE.)"""
    import threading

    with eng.begin() as c:
        c.execute(sa.text("DELETE FROM task_instance"))
        c.execute(sa.text("DELETE FROM dag_run"))
        c.execute(sa.text("INSERT INTO dag (dag_id, fileloc) VALUES ('d', 'x')"))
        c.execute(sa.text("INSERT INTO dag_run (id, dag_id, run_id, run_type, state, run_after, created_at) VALUES "
                          "(1, 'd', 'r', 'manual', 'running', '2026-01-01', '2026-01-01')"))
        c.execute(sa.text("INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, "
                          "priority_weight, pool, pool_slots, queue, executor, run_after) VALUES "
                          "(1, 'd', 'r', 't', 0, 'running', 1, 'default_pool', 1, 'default', 'default', '2026-01-01')"))
    stop, writes, errors = threading.Event(), [0], []

    def writer():  # a running TI ends and starts again, each change counted, until told to stop
        try:
            with eng.connect() as w:
                while not stop.is_set():
                    w.execute(sa.text("UPDATE task_instance SET state = CASE WHEN state = 'running' "
                                      "THEN 'success' ELSE 'running' END"))
                    w.commit()
                    writes[0] += 1
        except Exception as exc:  # noqa: BLE001 (reported by the assertion below)
            errors.append(exc)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for _ in range(5):
            migrate.downgrade(eng, "0035")
            migrate.upgrade(eng, "0036")
    finally:
        stop.set()
        thread.join(60)
    assert errors == [] and writes[0] > 0
    migrate.upgrade(eng)
    with eng.connect() as c:
        assert c.execute(sa.text("SELECT * FROM usage_drift")).all() == []
        assert [(f.name, f.status) for f in dbtriggers.check(c) if f.status != "ok"] == []


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


MIGRATION_LOCK_WAITERS = {
    "postgresql": "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                  "WHERE l.locktype = 'advisory' AND NOT l.granted AND a.datname = current_database()",
    "mysql": "SELECT count(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND DB = DATABASE()"}


def test_two_upgrades_at_once_run_one_after_the_other(eng, db_url):
    """Services started together after a package upgrade each upgrade the database. The second
    waits for the lock of migrations (a session lock, no table: named query migrate_lock), then finds nothing
    left to do and exits 0. (Before: both read the revision and applied the same migrations; the
    loser failed with a raw duplicate-object error, and on MySQL/MariaDB, whose DDL commits
    statement by statement, ran parts of a migration again.) The first here is this test, holding
    the lock while `engine db upgrade` in another process waits for it."""
    import subprocess
    import sys

    migrate.downgrade(eng, "base")
    with migrate.migration_lock(eng):
        second = subprocess.Popen([sys.executable, "-m", "cli.main", "--database-url", db_url, "db", "upgrade"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = dt.datetime.now() + dt.timedelta(seconds=120)
            with eng.connect() as conn:
                while conn.execute(sa.text(MIGRATION_LOCK_WAITERS[db.dialect_dir(eng)])).scalar() == 0:
                    conn.rollback()
                    assert second.poll() is None, f"the second upgrade did not wait: {second.communicate()}"
                    assert dt.datetime.now() < deadline, "the second upgrade never reached the lock"
            migrate._upgrade(eng, "head")   # the first, while the second waits
        except BaseException:
            second.kill()
            raise
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert migrate.current(eng) == migrate.head()
    with eng.connect() as conn:
        assert [f for f in procedures.check(conn) if f.status != "ok"] == []


def test_an_upgrade_that_cannot_get_the_lock_of_migrations_says_so_in_one_line(eng):
    with migrate.migration_lock(eng):
        with pytest.raises(EngineError, match=r"^another `engine db upgrade` or `engine db downgrade` of this "
                                              r"database has held the migration lock for 0.3 s; let it end"):
            with migrate.migration_lock(eng, wait=0.3):
                pass
    with migrate.migration_lock(eng, wait=0.3):   # released with the block
        pass


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


# Revision 0003 changed these in place (pre-release); 0001 and 0002 install, and the downgrade
# of 0003 restores, the text they had before (sql/<dialect>/previous/0003/).
CHANGED_BY_0003 = ["limit_usage", "queue_tis_v1", "claim_tis_v1", "create_dag_runs_v1"]
CLAIM_COLUMNS_0002 = ["ti_id", "dag_id", "run_id", "task_id", "map_index", "try_number", "kind", "bash_command",
                      "env", "python_callable", "op_kwargs", "map_args", "execution_timeout", "fileloc",
                      "log_path", "conf"]
CLAIM_COLUMNS_0003 = CLAIM_COLUMNS_0002 + ["next_method", "next_kwargs", "event"]


def _v1_calls(dialect: str, queue: str) -> dict:
    if dialect == "postgresql":
        return {"create_dag_runs": "SELECT * FROM create_dag_runs_v1(:now)",
                "schedule_tis": "SELECT * FROM schedule_tis_v1(:now)",
                "queue_tis": "SELECT * FROM queue_tis_v1(10, NULL, :now)",
                "claim_tis": f"SELECT * FROM claim_tis_v1(NULL, 'h', ARRAY['{queue}'], 10, '/logs', :now)"}
    return {"create_dag_runs": "CALL create_dag_runs_v1(:now, 16)",
            "schedule_tis": "CALL schedule_tis_v1(:now, 100)",
            "queue_tis": "CALL queue_tis_v1(10, NULL, :now, 2)",
            "claim_tis": f"CALL claim_tis_v1(NULL, 'h', '[\"{queue}\"]', 10, '/logs', :now)"}


def _v1_procedures_work(eng, rev: str) -> None:
    """At revision `rev`, with plain SQL rows: create_dag_runs_v1 starts one of two queued runs
    (max_active_runs 1), schedule_tis_v1 schedules the run's two TIs, queue_tis_v1 queues one
    (pool of 1 slot, the higher priority first, then nothing: the pool is full), claim_tis_v1
    starts its first try with the result columns of `rev`. The rows are deleted afterwards."""
    now = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)
    dialect = "postgresql" if eng.dialect.name == "postgresql" else "mysql"
    dag, pool, queue = f"d{rev}", f"p{rev}", f"q{rev}"
    call = _v1_calls(dialect, queue)
    assert migrate.current(eng) == rev
    with eng.begin() as conn:
        recorded = dict(conn.execute(sa.text("SELECT name, file_checksum FROM procedure_version")).all())
        for name in CHANGED_BY_0003:  # the text `rev` knew; below 0003 not the current file's
            assert recorded[name] == procedures.file_checksum(procedures.text_at(dialect, name, rev)), name
            if rev < "0003":
                assert recorded[name] != procedures.file_checksum(procedures.object_file(dialect, name).read_text())
        assert set(procedures.routine_counts(conn).values()) == {1}  # no overload left beside a restored one
        p = {"dag": dag, "pool": pool, "queue": queue, "now": now}
        conn.execute(sa.text("INSERT INTO pool (name, slots, include_deferred) VALUES (:pool, 1, false)"), p)
        conn.execute(sa.text("INSERT INTO dag (dag_id, fileloc, max_active_runs) VALUES (:dag, '/d.py', 1)"), p)
        conn.execute(sa.text("INSERT INTO task (dag_id, task_id, kind, bash_command, pool, priority_weight, queue) "
                             "VALUES (:dag, 'low', 'bash', 'true', :pool, 1, :queue), "
                             "       (:dag, 'high', 'bash', 'true', :pool, 5, :queue)"), p)
        for run_id in ("r1", "r2"):
            conn.execute(sa.text("INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, conf, created_at) "
                                 "VALUES (:dag, :r, 'manual', 'queued', :now, '{}', :now)"), {**p, "r": run_id})
    with eng.begin() as conn:
        assert list(conn.execute(sa.text(call["create_dag_runs"]), {"now": now}).one()) == [0, 1]
    with eng.begin() as conn:
        assert conn.execute(sa.text(call["schedule_tis"]), {"now": now}).one().tis_scheduled == 2
    with eng.begin() as conn:
        queued = conn.execute(sa.text(call["queue_tis"]), {"now": now}).all()
    assert [(r.dag_id, r.run_id, r.task_id) for r in queued] == [(dag, "r1", "high")]
    with eng.begin() as conn:
        assert conn.execute(sa.text(call["queue_tis"]), {"now": now}).all() == []  # the pool is full
        usage = conn.execute(sa.text("SELECT used, free FROM limit_usage WHERE kind = 'pool' AND "
                                     + ("key" if dialect == "postgresql" else "`key`") + " = :pool"), p).one()
        assert tuple(usage) == (1, 0)
    with eng.begin() as conn:
        claimed = conn.execute(sa.text(call["claim_tis"]), {"now": now})
        assert list(claimed.keys()) == (CLAIM_COLUMNS_0002 if rev < "0003" else CLAIM_COLUMNS_0003)
        rows = claimed.all()
    assert [(r.ti_id, r.try_number, r.log_path) for r in rows] == [
        (queued[0].ti_id, 1, f"/logs/dag_id={dag}/run_id=r1/task_id=high/attempt=1.log")]
    with eng.begin() as conn:
        states = conn.execute(sa.text("SELECT r.run_id, r.state, ti.task_id, ti.state AS ti_state FROM dag_run r "
                                      "LEFT JOIN task_instance ti ON ti.dag_run_id = r.id WHERE r.dag_id = :dag "
                                      "ORDER BY r.run_id, ti.task_id"), p).all()
        assert [tuple(s) for s in states] == [("r1", "running", "high", "running"),
                                              ("r1", "running", "low", "scheduled"), ("r2", "queued", None, None)]
        conn.execute(sa.text("DELETE FROM dag WHERE dag_id = :dag"), p)  # its tasks, runs and TIs with it
        conn.execute(sa.text("DELETE FROM pool WHERE name = :pool"), p)


def test_v1_procedures_work_at_every_revision_below_head(eng):
    """Down from head one revision at a time to 0002, and up from base to 0002, the procedures
    that 0003 changed in place work at each revision: below 0003 with their text of before 0003
    (which reads no table or column that 0003 adds), restored by 0003's downgrade."""
    for rev in ("0003", "0002"):
        migrate.downgrade(eng, rev)
        _v1_procedures_work(eng, rev)
    migrate.downgrade(eng, "base")
    for rev in ("0001", "0002"):
        migrate.upgrade(eng, rev)
        _v1_procedures_work(eng, rev)


@pytest.mark.parametrize("dialect_dir", ["postgresql", "mysql"])
def test_text_at_follows_the_chain_of_previous_copies(dialect_dir):
    """limit_usage was changed in place by 0003 and again by 0004: each revision gets the text
    it knew, from the first previous/<later revision>/ copy, else the current file (claim_tis_v1
    from 0003 on: _v1 functions are never changed in place after 0003)."""
    folder = SQL_DIR / dialect_dir
    for rev, path in [("0001", folder / "previous/0003/limit_usage.sql"),
                      ("0002", folder / "previous/0003/limit_usage.sql"),
                      ("0003", folder / "previous/0004/limit_usage.sql")]:
        assert procedures.text_at(dialect_dir, "limit_usage", rev) == path.read_text(), rev
    assert procedures.text_at(dialect_dir, "claim_tis_v1", "0002") == (folder / "previous/0003/claim_tis_v1.sql").read_text()
    assert procedures.text_at(dialect_dir, "claim_tis_v1", "0003") == (folder / "claim_tis_v1.sql").read_text()
