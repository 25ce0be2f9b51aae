"""analyze_stale_v1 (issue 11 item 6): the scheduler refreshes the statistics of a table that a
surge changed by more than analyze_fraction, once, and leaves quiet tables alone."""
from __future__ import annotations

import time
from datetime import datetime, timezone

import sqlalchemy as sa

from engine import db, scheduler
from tests.helpers import run_sql_file, sync_source, tick, trigger

DAG_SRC = """
with DAG("surge"):
    BashTask("t", bash_command="true")
"""


def analyze(eng, fraction=0.1, min_rows=1000) -> list[str]:
    with db.connect(eng) as conn:
        return [r.table_name for r in db.run(conn, "analyze_stale", fraction=fraction, min_rows=min_rows)]


def add_runs(eng, n: int) -> None:
    with eng.begin() as conn:
        conn.execute(sa.text("INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, created_at) "
                             "VALUES ('surge', :r, 'manual', 'success', :t, :t)"),
                     [{"r": f"r{n}-{i}-{time.monotonic_ns()}", "t": datetime(2026, 1, 1, tzinfo=timezone.utc)}
                      for i in range(n)])


def until(fn, what: str, timeout: float = 60.0):
    """fn() until it returns something true (the server's statistics counters are flushed
    asynchronously on PostgreSQL); its last value."""
    end = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > end:
            assert value, what
            return value
        time.sleep(0.2)


def test_a_surge_is_analyzed_once_a_quiet_table_never_and_nobody_waits(eng, cfg, tmp_path):
    run_sql_file(eng, "no_auto_stats")
    sync_source(eng, tmp_path / "dags", DAG_SRC)
    analyze(eng, fraction=0, min_rows=0)           # a known starting point: every table analyzed
    add_runs(eng, 300)
    assert "dag_run" not in analyze(eng)           # 300 changed rows: under min_rows
    add_runs(eng, 1200)
    summary = until(lambda: (lambda s: s if "dag_run" in s["tables_analyzed"] else None)(tick(eng, cfg)),
                    "the scheduler's pass analyzes dag_run after 1,500 new rows")
    assert "task_instance" not in summary["tables_analyzed"]
    assert "dag_run" not in analyze(eng)           # fresh again: not analyzed twice
    add_runs(eng, 100)                             # 100 of 1,500 rows: under 10%
    assert "dag_run" not in analyze(eng, min_rows=50)
    # A second scheduler does not wait for the first: it returns at once with nothing.
    add_runs(eng, 1500)
    with eng.connect() as holder:
        holder.execute(sa.text("SELECT name FROM scheduler_lock WHERE name = 'analyze_stale' FOR UPDATE"))
        started = time.monotonic()
        assert analyze(eng, fraction=0, min_rows=0) == []
        assert time.monotonic() - started < 30     # no lock wait (innodb_lock_wait_timeout is 50 s)
        holder.rollback()
    assert "dag_run" in until(lambda: analyze(eng, fraction=0, min_rows=1000), "dag_run analyzed once the lock is free")


def test_an_idle_scheduler_checks_statistics_now_and_then(eng, cfg, tmp_path, monkeypatch):
    """analyze_stale runs in the first pass, after a pass that did work and in a pass that
    starts runs, but an idle pass after an idle pass skips it until ANALYZE_IDLE_EVERY has
    passed since its last call (issue 12 item 5: idle cost)."""
    sync_source(eng, tmp_path / "dags", DAG_SRC)
    sent = []

    def seen(conn, cursor, statement, *args):
        sent.append("analyze_stale" in statement)
    sa.event.listen(eng, "before_cursor_execute", seen)
    s = scheduler.Scheduler(eng, cfg)
    try:
        def calls() -> int:
            sent.clear()
            s.run_once()
            return sum(sent)
        assert calls() == 1                            # the first pass (a new process: `engine tick`)
        for _ in range(5):                             # until a pass follows an idle one
            if calls() == 0:
                break
        else:
            raise AssertionError("every pass checked statistics")
        assert calls() == 0                            # idle after idle: skipped
        monkeypatch.setattr(scheduler, "ANALYZE_IDLE_EVERY", 0.0)
        assert calls() == 1                            # due again by time
        monkeypatch.setattr(scheduler, "ANALYZE_IDLE_EVERY", 3600.0)
        assert calls() == 0
        trigger(eng, "surge")                          # a run to start: this pass checks statistics
        assert calls() == 1
    finally:
        sa.event.remove(eng, "before_cursor_execute", seen)
        s.stop()
