"""Retention (clean_v1, `engine db clean`) and idle scheduler passes, on both dialects: old
rows go in bounded batches; nothing a live run or a live job still needs is ever deleted."""
from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from engine import db, retention
from engine.errors import EngineError
from engine.scheduler import Scheduler
from tests.helpers import claim, drive, finish, sql, sync_source, tick, trigger

DAGS = """
with DAG("r"):
    a = BashTask("a", bash_command="true")
    b = BashTask("b", bash_command="true")
    a >> b
"""
DAY = 86400.0


def db_now(eng):
    with db.connect(eng) as conn:
        return db.run(conn, "db_now").scalar_one()


def counts(eng) -> dict:
    return {t: sql(eng, f"SELECT count(*) FROM {'`trigger`' if t == 'trigger' and eng.dialect.name != 'postgresql' else t}")[0][0]
            for t in ("dag_run", "task_instance", "task_instance_history", "trigger", "job", "tick_log")}


@pytest.fixture
def world(eng, cfg, tmp_path):
    """Two finished runs, a third run with a running TI whose worker job died (not yet adopted by
    reset_orphans), an ended job nothing names, and tick_log rows."""
    sync_source(eng, tmp_path / "dags", DAGS)
    for run_id in ("r1", "r2"):
        trigger(eng, "r", run_id)
        drive(eng, cfg)
    trigger(eng, "r", "r3")
    tick(eng, cfg)
    (ti,) = claim(eng)
    dead = sql(eng, "SELECT id FROM job WHERE kind = 'scheduler' ORDER BY id")[0][0]
    sql(eng, "UPDATE job SET state = 'failed', end_date = start_date WHERE kind = 'scheduler'")
    sql(eng, "UPDATE task_instance SET worker_job_id = :j WHERE id = :t", j=dead, t=ti.ti_id)
    return {"ti": ti, "dead_job": dead}


def test_clean_deletes_old_rows_in_batches_and_keeps_what_live_work_needs(eng, cfg, world):
    before = counts(eng)
    assert before["dag_run"] == 3 and before["task_instance_history"] == 4 and before["tick_log"] > 0
    later = db_now(eng) + timedelta(days=40)
    # Nothing is old yet: nothing goes.
    assert retention.clean(eng, 30 * DAY)["tables"] == dict.fromkeys(retention.TABLES, 0)
    dry = retention.clean(eng, 30 * DAY, dry_run=True, now=later)
    assert counts(eng) == before  # a dry run deletes nothing
    result = retention.clean(eng, 30 * DAY, batch=1, now=later)
    assert result["done"] and result["tables"] == dry["tables"]
    assert result["calls"] >= 3  # batch 1: two runs (and more tick_log rows) take several calls
    assert result["tables"]["dag_run"] == 2 and result["tables"]["task_instance_history"] == 4
    after = counts(eng)
    # The live run r3 and its TIs stay; the finished runs' TIs went with them (cascade).
    assert [r.run_id for r in sql(eng, "SELECT run_id FROM dag_run")] == ["r3"]
    assert after["task_instance"] == 2
    assert after["tick_log"] == 0
    # The dead job a running TI names stays (reset_orphans reads it); no job still running goes.
    jobs = {r.id: r.state for r in sql(eng, "SELECT id, state FROM job")}
    assert world["dead_job"] in jobs and all(s == "running" or i == world["dead_job"] for i, s in jobs.items())
    # The running try can still be reported, and the run ends normally.
    assert finish(eng, world["ti"], 0) == "success"
    drive(eng, cfg)
    assert sql(eng, "SELECT state FROM dag_run")[0][0] == "success"
    # The newest run of a DAG is never deleted, however old.
    much_later = later + timedelta(days=400)
    assert retention.clean(eng, 30 * DAY, table="dag_run", now=much_later)["tables"]["dag_run"] == 0
    # Its dead job is now free to go.
    retention.clean(eng, 30 * DAY, now=much_later)
    assert world["dead_job"] not in {r.id for r in sql(eng, "SELECT id FROM job")}


def test_clean_keeps_the_history_and_trigger_of_a_live_run(eng, cfg, world):
    later = db_now(eng) + timedelta(days=40)
    sql(eng, "UPDATE task_instance_history SET run_id = 'r3'")  # as if r3 had earlier failed tries
    with db.connect(eng) as conn:
        conn.execute(sa.text("INSERT INTO " + ("trigger" if eng.dialect.name == "postgresql" else "`trigger`")
                             + " (classpath, kwargs, ti_id, created_at, fired_at) "
                             "VALUES ('x:Y', '{}', :t, :n, :n)"), {"t": world["ti"].ti_id, "n": db_now(eng)})
    tg = sql(eng, "SELECT max(id) FROM " + ("trigger" if eng.dialect.name == "postgresql" else "`trigger`"))[0][0]
    sql(eng, "UPDATE task_instance SET trigger_id = :g WHERE id = :t", g=tg, t=world["ti"].ti_id)
    result = retention.clean(eng, 30 * DAY, now=later)["tables"]
    assert result["task_instance_history"] == 0 and result["trigger"] == 0
    assert counts(eng)["task_instance_history"] == 4 and counts(eng)["trigger"] == 1


def test_interval_lock_and_bad_input(eng, cfg, world):
    def call(**kw):
        with db.connect(eng) as conn:
            return db.run(conn, "clean", **{"table_name": None, "older_than": 30 * DAY, "batch": 10,
                                            "dry_run": False, "interval": 3600, "now": None, **kw}).all()
    first = call(interval=None)                                          # `engine db clean`: always due
    assert [r.table_name for r in first] == list(retention.TABLES) and all(r.ran for r in first)
    assert [(r.ran, r.table_name) for r in call()] == [(False, None)]  # caught up less than an hour ago
    sql(eng, "UPDATE scheduler_lock SET last_run_at = :t WHERE name = 'db_clean'",
        t=db_now(eng) - timedelta(hours=2))
    assert all(r.ran for r in call())                                    # due again
    # Another cleaner holds the lock: a second one is refused at once (busy), waits, then gives up.
    with eng.connect() as holder:
        holder.execute(sa.text("SELECT name FROM scheduler_lock WHERE name = 'db_clean' FOR UPDATE"))
        with pytest.raises(sa.exc.DBAPIError) as exc:
            call()
        assert db.is_lock_busy(exc.value)
        with pytest.raises(EngineError, match="held scheduler_lock db_clean"):
            retention.clean(eng, 30 * DAY, busy_timeout=0.3)
        holder.rollback()
    with pytest.raises(sa.exc.DBAPIError, match="unknown table task_instance; use one of"):
        call(table_name="task_instance")
    with pytest.raises(EngineError, match="unknown table"):
        retention.clean(eng, DAY, table="dag")


def test_idle_scheduler_writes_no_tick_log_rows_and_cleans_when_due(eng, cfg, tmp_path):
    s = Scheduler(eng, cfg)
    try:
        for _ in range(3):
            summary = s.run_once()
        assert summary["tis_queued"] == 0 and s.idle_passes == 3 and s.passes == 3
        assert sql(eng, "SELECT count(*) FROM tick_log")[0][0] == 0
        # The first pass cleaned (nothing to do) and stamped db_clean: not due for clean_interval.
        assert sql(eng, "SELECT last_run_at FROM scheduler_lock WHERE name = 'db_clean'")[0][0] is not None
        # Old rows, and the last cleanup two hours ago: the next pass cleans them.
        sql(eng, "UPDATE scheduler_lock SET last_run_at = :t WHERE name = 'db_clean'",
            t=db_now(eng) - timedelta(hours=2))
        sql(eng, "INSERT INTO tick_log (hostname, started_at, duration_ms, runs_created, runs_started, "
                 "tis_scheduled, tis_queued, runs_finished) VALUES ('old', :t, 1, 0, 0, 0, 0, 0)",
            t=db_now(eng) - timedelta(days=400))
        summary = s.run_once()
        assert summary["rows_cleaned"] == 1
        # That pass did work: it is recorded, and the next idle one is not.
        assert [r.hostname for r in sql(eng, "SELECT hostname FROM tick_log")] == [s.job.hostname]
        s.run_once()
        assert sql(eng, "SELECT count(*) FROM tick_log")[0][0] == 1
    finally:
        s.stop()


def test_db_clean_command_and_its_bad_input(db_url, eng, cfg, world):
    from click.testing import CliRunner

    from cli.main import main

    def cli(*args):
        return CliRunner().invoke(main, ["--database-url", db_url, "db", "clean", *args])
    before = counts(eng)
    r = cli("--dry-run", "--json")
    assert r.exit_code == 0 and json_tables(r.output) == dict.fromkeys(retention.TABLES, 0)
    for bad, needle in (("3x", "is not an age"), ("0d", "out of range"), ("nan", "is not an age"), ("-1d", "is not an age")):
        r = cli("--older-than", bad)
        assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1 and needle in r.output, r.output
    r = cli("--table", "task_instance")
    assert r.exit_code == 1 and "is not one of" in r.output
    r = cli("--batch", "0")
    assert r.exit_code == 1 and "--batch" in r.output
    assert counts(eng) == before  # refused input changed nothing
    # Everything older than one second: the finished runs r1, r2 go, the live run r3 stays.
    sql(eng, "UPDATE dag_run SET end_date = :t WHERE state = 'success'", t=db_now(eng) - timedelta(days=2))
    r = cli("--older-than", "1d", "--table", "dag_run")
    assert r.exit_code == 0 and "deleted 2 row(s)" in r.output, r.output
    assert [x.run_id for x in sql(eng, "SELECT run_id FROM dag_run")] == ["r3"]


def json_tables(output: str) -> dict:
    import json

    return json.loads(output)["tables"]
