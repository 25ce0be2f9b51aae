"""For the DBA: released files stay as released, each service calls the version of a procedure
its settings name (default: the newest installed one it can call), and the cost and plans of
the procedures can be read without auto_explain by hand."""
from __future__ import annotations

import json
import os
import re

import pytest
import sqlalchemy as sa

from engine import calls, db, dba, manifest, procedures
from engine.scheduler import queue_knobs
from engine.config import load_config
from engine.errors import EngineError
from engine.scheduler import Scheduler
from tests.reference import TI
from tests.world import call_queue_tis, load_one_run


def test_every_released_file_is_in_the_manifest_unchanged():
    """A released _vN file, previous/ copy or revision never changes; a new one is listed by
    `python -m engine.manifest add` when it lands."""
    assert manifest.problems() == []


def test_a_changed_released_file_is_reported_and_never_installed(eng, monkeypatch):
    dialect = procedures.dialect_of(eng.connect())
    key = f"sql/{dialect}/heartbeat_v1.sql"
    entries = {**manifest.released(), key: "0" * 64}  # as if the file had been edited since release
    monkeypatch.setattr(manifest, "released", lambda: entries)
    with db.connect(eng) as conn:
        found = {(f.name, f.status) for f in procedures.check(conn) if f.status != "ok"}
        assert found == {(key, "changed-released")}
        conn.execute(sa.text("DROP FUNCTION heartbeat_v1"))
    with pytest.raises(EngineError, match=r"heartbeat_v1.sql differs from its released text"):
        with db.connect(eng) as conn:
            procedures.repair(conn)


# ---- which version a service calls ---------------------------------------------------------

def _fake_version(dialect: str, version: int, extra_arg: bool = False) -> str:
    """queue_tis_v<version> with queue_tis_v2's arguments and result (plus one more argument when
    extra_arg), whose body only raises 'queue_tis_v<version> called'."""
    text = procedures.object_file(dialect, "queue_tis_v2").read_text()
    name = f"queue_tis_v{version}"
    if dialect == "postgresql":
        head = text[text.index("CREATE OR REPLACE FUNCTION"):text.index("AS $$")]
        if extra_arg:
            head = head.replace("p_max_tis int,", "p_max_tis int, p_extra int,", 1)
        return (head.replace("queue_tis_v2", name, 1)
                + f"AS $$ BEGIN RAISE EXCEPTION '{name} called'; END; $$;\n")
    head = text[text.index("CREATE PROCEDURE"):text.index("BEGIN", text.index("CREATE PROCEDURE"))]
    if extra_arg:
        head = head.replace("IN p_max_tis INT,", "IN p_max_tis INT, IN p_extra INT,", 1)
    return head.replace("queue_tis_v2", name, 1) + f"BEGIN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{name} called'; END"


def _world(eng) -> None:
    tis = [TI(id=i, dag_id="d", run=1, task_id="t", map_index=i, state="scheduled", priority_weight=1,
              pool="default_pool", pool_slots=1) for i in range(1, 4)]
    load_one_run(eng, tis)


def _queue_step(eng, cfg) -> tuple[int, list[str]]:
    summary = Scheduler(eng, cfg).run_once()
    return summary["tis_queued"], [e["error"] for e in summary["errors"]]


def test_services_call_the_newest_installed_version_or_the_pinned_one(eng, cfg):
    """A DBA's queue_tis_v<shipped+1> (installed by a revision: recorded) is what a service calls
    by default; a service pinned to v2 keeps calling v2; a version with other arguments
    (v<shipped+2>) is never chosen by default and cannot be pinned."""
    dialect = db.dialect_dir(eng)
    tuned, other_args, unrecorded = (calls.shipped(dialect)["queue_tis"] + k for k in (1, 2, 3))
    _world(eng)
    with db.connect(eng) as conn:
        procedures.install_one(conn, f"queue_tis_v{tuned}", "dba-tuned", _fake_version(dialect, tuned))
        procedures.install_one(conn, f"queue_tis_v{other_args}", "dba-tuned",
                               _fake_version(dialect, other_args, extra_arg=True))
        # Not recorded by any migration: never chosen.
        procedures._execute_script(conn, _fake_version(dialect, unrecorded))

    newest = calls.pin(eng)
    assert calls.calling(newest)["queue_tis"] == tuned
    queued, errors = _queue_step(newest, cfg)
    assert queued == 0 and any(f"queue_tis_v{tuned} called" in e for e in errors)

    pinned = calls.pin(eng, "queue_tis=2")
    assert calls.calling(pinned)["queue_tis"] == 2
    assert _queue_step(pinned, cfg) == (3, [])

    with pytest.raises(EngineError, match=rf"queue_tis_v{other_args} takes .* but this release calls queue_tis as"):
        calls.pin(eng, f"queue_tis={other_args}")
    installed = ", ".join(f"v{k}" for k in range(1, other_args + 1))
    with pytest.raises(EngineError, match=rf"queue_tis_v{unrecorded} is not installed by a migration "
                                          rf"\(installed: {installed}\)"):
        calls.pin(eng, f"queue_tis={unrecorded}")
    # The plain engine (no pin()) calls what the named queries name: the shipped version.
    assert calls.calling(eng)["queue_tis"] == calls.shipped(dialect)["queue_tis"]


@pytest.mark.parametrize("value, message", [
    ("queue_tis", "'queue_tis' is not NAME=VERSION; write e.g. 'queue_tis=2'"),
    ("queue_tis=two", "'queue_tis=two' is not NAME=VERSION"),
    ("queue_job=2", "the engine calls no procedure 'queue_job'; pin one of"),
    ("queue_tis=1,queue_tis=2", "queue_tis is pinned twice (1 and 2); keep one"),
    ("queue_tis=0", "versions start at 1"),
])
def test_bad_procedure_versions_setting_is_one_line(monkeypatch, tmp_path, value, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENGINE_PROCEDURE_VERSIONS", value)
    with pytest.raises(EngineError) as err:
        load_config()
    assert str(err.value).startswith("setting procedure_versions from ENGINE_PROCEDURE_VERSIONS: ")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_pinned_version_moves_every_named_statement_that_calls_it():
    text = "SELECT * FROM queue_tis_v3(:max_tis, :job_id, :now)  -- see queue_tis_v3."
    assert db.with_versions(text, (("queue_tis", 3, 7),)) == \
        "SELECT * FROM queue_tis_v7(:max_tis, :job_id, :now)  -- see queue_tis_v3."
    assert db.with_versions("CALL queue_tis_v3 (1)", (("queue_tis", 3, 1), ("claim_tis", 2, 3))) == "CALL queue_tis_v1 (1)"
    # A statement written for an older version of the procedure is left alone.
    assert db.with_versions("SELECT heartbeat_v1(:job_id)", (("heartbeat", 2, 3),)) == "SELECT heartbeat_v1(:job_id)"


# ---- cost and plans -------------------------------------------------------------------------

def test_db_procedures_lists_every_object_with_the_version_called_and_its_calls(eng):
    dialect = db.dialect_dir(eng)
    _world(eng)
    if dialect == "postgresql":
        with db.connect(eng) as conn:
            database = conn.execute(sa.text("SELECT current_database()")).scalar_one()
            conn.execute(sa.text(f'ALTER DATABASE "{database}" SET track_functions = \'pl\''))
        eng.dispose()  # new sessions read the database's setting
    with db.connect(eng) as conn:
        db.run(conn, "queue_tis", max_tis=10, job_id=None, now=None, **queue_knobs()).all()
        if dialect == "postgresql":
            conn.execute(sa.text("SELECT pg_stat_force_next_flush()"))
    with db.connect(eng) as conn:
        collected = db.run(conn, "stats_collection").one().collected
        rows, note = dba.costs(conn, {"queue_tis": 1})
    by_name = {r.name: r for r in rows}
    assert set(by_name) == set(procedures.expected_objects(dialect))
    assert by_name["queue_tis_v1"].called == "pinned" and by_name["queue_tis_v2"].called == ""
    assert by_name["claim_tis_v5"].called == "yes" and by_name["claim_tis_v4"].called == ""
    assert by_name["limit_usage"].kind == "view" and by_name["limit_usage"].called == ""
    assert all(r.status == "ok" and r.file_checksum and r.db_checksum for r in rows)
    if dialect == "postgresql":
        assert collected and note is None
    called = f"queue_tis_v{calls.shipped(dialect)['queue_tis']}"
    if collected:
        assert by_name[called].calls >= 1 and by_name[called].mean_ms > 0
    else:
        assert note and "performance_schema = OFF" in note and by_name[called].calls is None


def test_db_explain_shows_each_statement_inside_and_changes_nothing(eng):
    dialect = db.dialect_dir(eng)
    _world(eng)
    with db.connect(eng) as c:  # an earlier pass: it folded the world's usage deltas (what a call
        call_queue_tis(c, None, max_tis=0, job_id=None, now=None)  # folds is what changed since)
    result = dba.explain(eng, "queue_tis", {"max_tis": 10}, {})
    assert result.call == f"queue_tis_v{calls.shipped(dialect)['queue_tis']}"
    texts = [" ".join(s.text.split()) for s in result.statements]
    assert any(re.search(r"FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE", t) for t in texts), texts
    # (MariaDB's profiler lists a statement that fires triggers as the triggers' statements: the
    # UPDATE that queues shows as the usage counters' inserts.)
    queued = r"\bUPDATE\b.*\btask_instance\b" if dialect == "postgresql" else \
        r"\bUPDATE\b.*\btask_instance\b|INSERT INTO usage_delta"
    assert any(re.search(queued, t, re.S) for t in texts), texts
    if dialect == "postgresql":
        assert all(s.plan for s in result.statements) and result.total_ms > 0
        assert any("actual time=" in s.plan for s in result.statements)
    else:
        assert result.note.startswith("MariaDB/MySQL cannot show the plan")
    with db.connect(eng) as conn:  # rolled back: nothing was queued
        states = conn.execute(sa.text("SELECT DISTINCT state FROM task_instance")).scalars().all()
    assert states == ["scheduled"]
    v1 = dba.explain(eng, "queue_tis_v1", {"max_tis": 10}, {})
    assert v1.call == "queue_tis_v1"
    # The scheduler's named query `heartbeat` calls heartbeat_v1 (the worker's calls v2): the
    # label names what runs.
    assert calls.called_by(dialect, "heartbeat", "heartbeat") == 1 < calls.shipped(dialect)["heartbeat"]
    assert dba.explain(eng, "heartbeat", {}, {}).call == "heartbeat_v1"


def test_db_explain_measures_queue_tis_as_a_running_scheduler_calls_it(db_url, eng):
    """PostgreSQL's queue_tis makes its scratch tables at a session's first call. explain's
    warm-up call is rolled back to a savepoint, which drops tables made after it, so the measured
    call made them again and planned every statement that reads them: a session's first call
    (~30-50 ms on the small passes against ~8 in a running scheduler). The warm-up makes them
    first, outside the savepoint (a call of max_tis 0): after it, on a session that never called
    queue_tis, they are there, and the state is as it was."""
    if db.dialect_dir(eng) != "postgresql":
        pytest.skip("MySQL/MariaDB's temporary tables are not transactional: a rollback keeps them")
    _world(eng)
    fresh = db.make_engine(db_url)   # (a pool of its own: a session that never called queue_tis)
    try:
        with fresh.connect() as conn:
            tx = conn.begin()
            temp = "SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema() AND relkind = 'r'"
            assert conn.execute(sa.text(temp)).scalar() == 0
            dba._warm_up(conn, "queue_tis", dba.params_of("postgresql", "queue_tis", {"max_tis": 10}, {}))
            made = conn.execute(sa.text(temp)).scalar()
            states = conn.execute(sa.text("SELECT DISTINCT state FROM task_instance")).scalars().all()
            tx.rollback()
    finally:
        fresh.dispose()
    assert made > 0
    assert states == ["scheduled"]


@pytest.mark.parametrize("procedure, args, message", [
    ("nope", {}, "no procedure 'nope' to explain; name one of"),
    ("queue_tis", {"bogus": 1}, "queue_tis takes no parameter 'bogus'; its parameters: aging_rate, aging_cap, reserve_after, max_tis, job_id, now"),
    ("claim_tis", {}, "claim_tis needs --arg hostname=VALUE"),
    ("queue_tis_v0", {"max_tis": 1}, "queue_tis_v0 is not installed by a migration"),  # not the current version, silently
    ("queue_tis", {"max_tis": 99999999999999999},
     "--arg max_tis=99999999999999999 is out of range: queue_tis_v"),
    ("queue_tis", {"max_tis": 1, "job_id": -(1 << 63) - 1}, f"--arg job_id={-(1 << 63) - 1} is out of range: queue_tis_v"),
    # A parameter that stands for a setting keeps to the setting's range (2147483647 fits the
    # parameter, and overflowed inside queue_tis on PostgreSQL).
    ("queue_tis", {"max_tis": 2147483647},
     "setting max_tis from --arg max_tis: 2147483647 is out of range; use an integer from 1 to 100000"),
    ("queue_tis", {"max_tis": 1.5}, "setting max_tis from --arg max_tis: 1.5 is not an integer"),
    ("queue_tis", {"max_tis": 1, "aging_cap": 0},
     "setting priority_aging_cap from --arg aging_cap: 0 is out of range; use an integer from 1 to 1000000"),
    ("queue_tis", {"max_tis": 1, "aging_rate": -1.0}, "setting priority_aging from --arg aging_rate: -1.0 is out of range"),
    ("schedule_tis", {"batch": 0}, "setting schedule_batch from --arg batch: 0 is out of range"),
])
def test_db_explain_bad_input_is_one_line(module_db_url, procedure, args, message):
    eng = db.make_engine(module_db_url)
    try:
        with pytest.raises(EngineError) as err:
            dba.explain(eng, procedure, args, {})
    finally:
        eng.dispose()
    assert message in str(err.value) and "\n" not in str(err.value)


def test_db_explain_timeout_is_at_least_one_millisecond_and_says_so(module_db_url, monkeypatch):
    """statement_timeout = 0 is no limit at all: a timeout under 1 ms is 1 ms. A call that runs
    longer than --timeout is named, not blamed on the connection."""
    seen = []

    def run(eng, name, call, params, timeout_ms):
        seen.append(timeout_ms)
        raise sa.exc.OperationalError("CALL", {}, Exception(1969, "max_statement_time exceeded"))
    monkeypatch.setattr(dba, "_explain_postgresql", run)
    monkeypatch.setattr(dba, "_explain_mysql", run)
    eng = db.make_engine(module_db_url)
    try:
        with pytest.raises(EngineError) as err:
            dba.explain(eng, "heartbeat", {}, {}, timeout_s=0.0004)
    finally:
        eng.dispose()
    assert seen == [1]
    assert str(err.value) == "heartbeat_v1 ran longer than --timeout 0.001 s; raise --timeout"


@pytest.mark.parametrize("text, parsed", [
    ("max_tis=32", ("max_tis", 32)), ("now=null", ("now", None)), ("queues=[\"a\",\"b\"]", ("queues", ["a", "b"])),
    ("timeout=1.5", ("timeout", 1.5)), ("hostname=h1", ("hostname", "h1")),
    ("job_id=9223372036854775807", ("job_id", (1 << 63) - 1)),  # 19 digits: an integer, not a float
])
def test_explain_args(text, parsed):
    assert dba.parse_arg(text) == parsed


@pytest.mark.parametrize("text, message", [
    ("max_tis", "write NAME=VALUE"), ("Max-tis=1", "is not a parameter name"), ("x=nan", "not a finite number"),
    ("now=", "has no value: write --arg now=null"),
])
def test_bad_explain_args(text, message):
    with pytest.raises(EngineError, match=message):
        dba.parse_arg(text)


def test_the_commands_end_to_end(db_url):
    """`engine db procedures`, `engine db explain` and a bad pin, through the command line."""
    from tests.test_cli import assert_one_line_error, engine
    listing = engine(db_url, "db", "procedures", "--json")
    assert listing.returncode == 0, listing.stderr
    objects = {o["name"]: o for o in json.loads(listing.stdout)["objects"]}
    shipped = f"queue_tis_v{calls.shipped('mysql' if db.is_mysql_url(db_url) else 'postgresql')['queue_tis']}"
    assert objects[shipped]["called"] == "yes" and objects["queue_tis_v1"]["called"] == ""
    pinned = engine(db_url, "db", "procedures", env={"ENGINE_PROCEDURE_VERSIONS": "queue_tis=1"})
    assert pinned.returncode == 0 and re.search(r"^queue_tis_v1 .* pinned\b", pinned.stdout, re.M), pinned.stdout
    explained = engine(db_url, "db", "explain", "queue_tis", "--arg", "max_tis=4", "--slowest", "1")
    assert explained.returncode == 0, explained.stderr
    # (an empty database: the call is its nothing-to-decide probes, which read task_instance)
    assert explained.stdout.startswith(f"{shipped}: ") and "task_instance" in explained.stdout
    missing = int(shipped.rsplit("_v", 1)[1]) + 1
    assert_one_line_error(engine(db_url, "tick", env={"ENGINE_PROCEDURE_VERSIONS": f"queue_tis={missing}"}),
                          f"setting procedure_versions: queue_tis_v{missing} is not installed by a migration")
    assert_one_line_error(engine(db_url, "db", "explain", "queue_tis", "--arg", "max_tis"),
                          "--arg 'max_tis': write NAME=VALUE")
    assert_one_line_error(engine(db_url, "db", "explain", "queue_tis", "--arg", "max_tis=99999999999999999"),
                          f"--arg max_tis=99999999999999999 is out of range: {shipped} takes a 32-bit integer")


# ---- several deployments on one server ------------------------------------------------------

def test_two_deployments_share_a_server_without_seeing_each_other(db_url, cfg, tmp_path):
    """Setting schema (ENGINE_SCHEMA): a PostgreSQL schema each (MySQL: a database each) with
    its own tables, lock rows, procedures and views. The same DAG id in both is two DAGs; a
    lock held by one deployment's scheduler does not make the other's busy."""
    from engine import migrate
    from tests.helpers import drive, sync_source, tick, trigger
    dialect = "mysql" if db.is_mysql_url(db_url) else "postgresql"
    base = sa.engine.make_url(db_url).database
    names = {"a": f"{base}_a" if dialect == "mysql" else "dep_a", "b": f"{base}_b" if dialect == "mysql" else "dep_b"}
    engines = {k: db.make_engine(db_url, schema=name) for k, name in names.items()}
    try:
        for k, e in engines.items():
            db.ensure_database(e)
            migrate.upgrade(e)
        sync_source(engines["a"], tmp_path / "a", """
            with DAG("shared", schedule=None):
                BashTask("t", bash_command="true")
        """)
        sync_source(engines["b"], tmp_path / "b", """
            with DAG("shared", schedule=None):
                BashTask("u", bash_command="true")
            with DAG("only_b", schedule=None):
                BashTask("v", bash_command="true")
        """)
        for e in engines.values():
            trigger(e, "shared")

        with engines["a"].connect() as holder:  # a's scheduler is inside queue_tis
            holder.execute(sa.text("SELECT name FROM scheduler_lock WHERE name = 'queue_tis' FOR UPDATE")).all()
            assert "queue_tis" not in tick(engines["b"], cfg)["busy"]
            assert "queue_tis" in tick(engines["a"], cfg)["busy"]
            holder.rollback()

        for e in engines.values():
            drive(e, cfg)
        seen = {}
        for k, e in engines.items():
            with db.connect(e) as conn:
                seen[k] = (sorted(conn.execute(sa.text("SELECT dag_id FROM dag")).scalars()),
                           sorted(conn.execute(sa.text("SELECT task_id || '' FROM task_instance" if dialect == "postgresql"
                                                       else "SELECT task_id FROM task_instance")).scalars()),
                           conn.execute(sa.text("SELECT state FROM dag_run")).scalars().all())
                assert [f for f in procedures.check(conn) if f.status != "ok"] == []
        assert seen == {"a": (["shared"], ["t"], ["success"]), "b": (["only_b", "shared"], ["u"], ["success"])}
        if dialect == "postgresql":  # the database's default schema saw nothing of either
            plain = db.make_engine(db_url)
            with db.connect(plain) as conn:
                assert conn.execute(sa.text("SELECT count(*) FROM public.dag")).scalar_one() == 0
            plain.dispose()
    finally:
        for e in engines.values():
            e.dispose()
        if dialect == "mysql":
            admin = db.make_engine(db_url)
            with admin.begin() as conn:
                for name in names.values():
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
            admin.dispose()


def test_a_bad_schema_name_is_one_line(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENGINE_SCHEMA", "prod; DROP TABLE dag")
    with pytest.raises(EngineError, match=r"^setting schema from ENGINE_SCHEMA: 'prod; DROP TABLE dag' is not a "
                                          r"schema name; use lower-case letters"):
        load_config()


# ---- least privilege -----------------------------------------------------------------------

def _denied(eng, text: str, **params) -> bool:
    try:
        with db.connect(eng) as conn:
            conn.execute(sa.text(text), params).all() if text.lstrip().upper().startswith(("SELECT", "CALL")) \
                else conn.execute(sa.text(text), params)
    except sa.exc.DBAPIError as exc:
        message = db.error_message(exc).lower()
        assert "denied" in message or "permission" in message, message
        return True
    return False


def test_each_role_can_do_its_job_and_nothing_more(db_url, cfg, tmp_path):
    """engine db roles --apply, then a login user per role: the scheduler schedules, the worker
    claims and finishes through its procedures only (no UPDATE of task_instance, no reading of
    dag_run conf, no queue_tis), the triggerer likewise, the reader sees the views only. A
    procedure reinstalled by `engine db upgrade` gets its grants back."""
    import os

    from engine import migrate, roles
    from engine.jobs import Job
    from tests.helpers import sync_source, trigger
    dialect = "mysql" if db.is_mysql_url(db_url) else "postgresql"
    schema = sa.engine.make_url(db_url).database if dialect == "mysql" else f"roles_{os.getpid()}"
    owner = db.make_engine(db_url, schema=schema)
    prefix = roles.default_prefix(owner)
    users = {kind: f"u_{prefix}_{kind}"[:60] for kind in ("scheduler", "worker", "triggerer", "reader")}
    engines = {}
    try:
        migrate.upgrade(owner)
        sync_source(owner, tmp_path, """
            with DAG("d", schedule=None):
                BashTask("t", bash_command="true")
        """)
        trigger(owner, "d")
        with db.connect(owner) as conn:
            roles.apply(conn, prefix)
            for kind, user in users.items():
                if dialect == "postgresql":
                    conn.exec_driver_sql(f"CREATE ROLE {user} LOGIN PASSWORD 'pw' IN ROLE {prefix}_{kind}")
                else:
                    conn.exec_driver_sql(f"CREATE USER '{user}'@'%%' IDENTIFIED BY 'pw'")
                    conn.exec_driver_sql(f"GRANT {prefix}_{kind} TO '{user}'@'%%'")
                    conn.exec_driver_sql(f"SET DEFAULT ROLE {prefix}_{kind} FOR '{user}'@'%%'")
        url = sa.engine.make_url(db_url)
        engines = {kind: db.make_engine(url.set(username=user, password="pw").render_as_string(hide_password=False),
                                        schema=schema) for kind, user in users.items()}
        with db.connect(owner) as conn:
            assert [f for f in procedures.check(conn) if f.status != "ok"] == []  # grants are not drift

        assert Scheduler(engines["scheduler"], cfg).run_once()["tis_queued"] == 1
        worker = engines["worker"]
        assert migrate.current(worker) == migrate.head()
        assert calls.calling(calls.pin(worker))["claim_tis"] == calls.shipped(dialect)["claim_tis"]
        job = Job(worker, "worker")
        job.register()
        with db.connect(worker) as conn:
            (ti,) = db.run(conn, "claim_tis", job_id=job.id, hostname="h", queues=["default"], limit=5,
                           log_dir=str(tmp_path), now=None).all()
        assert job.heartbeat()
        with db.connect(worker) as conn:
            assert db.run(conn, "pending_work", queues=["default"]).scalar_one() == 1
            assert db.run(conn, "finish_ti", ti_id=ti.ti_id, try_number=ti.try_number, exit_code=0, timed_out=False,
                          reason=None, now=None).scalar() == "success"
        job.finish()
        assert _denied(worker, "UPDATE task_instance SET state = 'failed'")
        assert _denied(worker, "SELECT conf FROM dag_run")
        assert _denied(worker, "SELECT * FROM pending_reasons")
        assert _denied(worker, calls_queue_tis(dialect))

        triggerer = engines["triggerer"]
        tjob = Job(triggerer, "triggerer")
        tjob.register()
        with db.connect(triggerer) as conn:
            assert db.run(conn, "claim_triggers", job_id=tjob.id, limit=10, threshold=60, now=None).all() == []
            assert db.run(conn, "owned_triggers", job_id=tjob.id).all() == []
            db.run(conn, "release_triggers", job_id=tjob.id)
        assert _denied(triggerer, "SELECT * FROM task_instance")
        assert _denied(triggerer, calls_queue_tis(dialect))

        reader = engines["reader"]
        with db.connect(reader) as conn:
            assert conn.execute(sa.text("SELECT * FROM pool_usage")).all()
            conn.execute(sa.text("SELECT * FROM pending_reasons")).all()
        assert _denied(reader, "SELECT * FROM task_instance")
        assert _denied(reader, "UPDATE pool SET slots = 1")

        Scheduler(engines["scheduler"], cfg).run_once()
        with db.connect(owner) as conn:
            assert conn.execute(sa.text("SELECT state FROM dag_run")).scalars().all() == ["success"]
            conn.execute(sa.text("DROP FUNCTION heartbeat_v1"))
        migrate.upgrade(owner)  # reinstalls heartbeat_v1, and grants it again
        job = Job(worker, "worker")
        job.register()
        assert job.heartbeat()
    finally:
        for e in engines.values():
            e.dispose()
        if dialect == "postgresql":  # the users' sessions end (and drop their temp tables) first
            import time
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with db.connect(owner) as conn:
                    if not conn.execute(sa.text("SELECT 1 FROM pg_stat_activity WHERE usename = ANY (:u)"),
                                        {"u": list(users.values())}).first():
                        break
                time.sleep(0.05)
        with db.connect(owner) as conn:
            for kind, user in users.items():
                if dialect == "postgresql":
                    conn.exec_driver_sql(f"DROP OWNED BY {user}")
                    conn.exec_driver_sql(f"DROP ROLE IF EXISTS {user}")
                else:
                    conn.exec_driver_sql(f"DROP USER IF EXISTS '{user}'@'%%'")
            for role in roles.names(prefix).values():
                if dialect == "postgresql":
                    conn.exec_driver_sql(f"DROP OWNED BY {role}")
                    conn.exec_driver_sql(f"DROP ROLE IF EXISTS {role}")
                else:
                    conn.exec_driver_sql(f"DROP ROLE IF EXISTS {role}")
        owner.dispose()


def calls_queue_tis(dialect: str) -> str:
    return "SELECT * FROM queue_tis_v2(1, NULL, NULL)" if dialect == "postgresql" else "CALL queue_tis_v2(1, NULL, NULL, 2)"


def test_sql_lint_has_the_mysql_server_parse_the_mysql_files(mysql_server, tmp_path):
    """With a server, a MySQL routine body that does not parse, a view on a missing table and a
    named statement naming a missing column are each one `file:line: message`; the shipped
    files pass; the scratch database is gone afterwards."""
    from engine.lint import lint
    from engine.paths import SQL_DIR
    url = mysql_server.url.render_as_string(hide_password=False)
    folder = tmp_path / "mysql"
    (folder / "queries").mkdir(parents=True)
    body = (SQL_DIR / "mysql" / "heartbeat_v1.sql").read_text()
    (folder / "heartbeat_v1.sql").write_text(body.replace("UPDATE job SET latest_heartbeat", "UPDAT job SET latest_heartbeat"))
    view = (SQL_DIR / "mysql" / "pool_usage.sql").read_text()
    (folder / "pool_usage.sql").write_text(view.replace("FROM", "FROM no_such_table,", 1))
    (folder / "queries" / "pools_list.sql").write_text("SELECT nope_col FROM pool WHERE name = :name\n")
    _, problems = lint(tmp_path, url)
    found = {(p.path.name, p.line): p.message for p in problems}
    line = next(i for i, t in enumerate(body.splitlines(), 1) if "UPDATE job SET latest_heartbeat" in t)
    assert set(found) == {("heartbeat_v1.sql", line), ("pool_usage.sql", 1), ("pools_list.sql", 1)}, found
    assert "error in your SQL syntax" in found[("heartbeat_v1.sql", line)]
    assert "no_such_table' doesn't exist" in found[("pool_usage.sql", 1)]
    assert "Unknown column 'nope_col'" in found[("pools_list.sql", 1)]
    assert all("\n" not in m for m in found.values())
    assert lint(SQL_DIR / "mysql", url)[1] == []
    with mysql_server.admin.connect() as conn:
        # this process's scratch databases only: another run killed mid-lint may have left one
        assert conn.execute(sa.text("SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE :p"),
                            {"p": f"engine\\_lint\\_{os.getpid()}\\_%"}).scalar_one() == 0
