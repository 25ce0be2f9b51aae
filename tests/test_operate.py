"""Operating runs and tasks from the command line (issue 10, section 1), on both dialects:
inspect (runs list/show, tasks list/state, logs), change (tasks clear/mark/kill, runs
mark/cancel: stored functions, history rows), stop running tries through the worker's
heartbeat, backfill, trigger --logical-date, dags test / tasks test, and bad input (one line,
nothing changed)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
import sqlalchemy as sa

from cli.main import main as engine_cli
from engine import db
from engine.config import load_config
from engine.scheduler import Scheduler
from engine.worker import Worker
from tests.helpers import claim, drive, finish, sql, sync_source, tick, ti_states, trigger

CHAIN = """
from engine import DAG, BashTask

with DAG("chain"):
    a = BashTask("a", bash_command="echo a ran")
    b = BashTask("b", bash_command="if [ -f {marker} ]; then echo b ok; else echo b failing; exit 3; fi")
    c = BashTask("c", bash_command="echo c ran")
    a >> b >> c
"""

SLOW = """
from engine import DAG, BashTask

with DAG("slow"):
    s = BashTask("s", bash_command="if [ -f {marker} ]; then echo done; else echo sleeping; exec sleep 600; fi")
    t = BashTask("t", bash_command="echo t")
    s >> t
"""

PLAIN = """
from engine import DAG, BashTask

with DAG("plain"):
    x = BashTask("x", bash_command="echo x")
    y = BashTask("y", bash_command="echo y")
    x >> y

with DAG("daily", schedule="0 0 * * *", start_date="2026-01-01", catchup=False):
    BashTask("d", bash_command="echo day $ENGINE_RUN_ID")
"""


def cli(url, *args):
    return CliRunner().invoke(engine_cli, list(args), env={"ENGINE_DATABASE_URL": url})


def ok(result):
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def refused(result, *needles):
    assert result.exit_code == 1, f"exit {result.exit_code}: {result.output}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def snapshot(eng) -> dict:
    """Everything an operator command may change."""
    return {"tis": sql(eng, "SELECT id, state, try_number, max_tries, state_reason FROM task_instance ORDER BY id"),
            "runs": sql(eng, "SELECT id, state, state_reason FROM dag_run ORDER BY id"),
            "history": sql(eng, "SELECT COUNT(*) FROM task_instance_history")[0][0],
            "changes": sql(eng, "SELECT COUNT(*) FROM state_change")[0][0]}


def assert_history_invariant(eng) -> None:
    """One task_instance_history row per finished try, never two."""
    dup = sql(eng, "SELECT ti_id, try_number, COUNT(*) FROM task_instance_history GROUP BY ti_id, try_number "
                   "HAVING COUNT(*) > 1")
    assert dup == [], dup


def run_until(eng, cfg, worker, done, rounds=600):
    """Scheduler and worker passes in this process until done() (states, not time)."""
    sched = Scheduler(eng, cfg)
    try:
        for _ in range(rounds):
            sched.run_once()
            worker.run_once()
            if done():
                return
            time.sleep(0.05)
    finally:
        sched.stop()
    raise AssertionError("the engine did not get there")


def run_state(eng, dag_id, run_id="r1"):
    return sql(eng, "SELECT state FROM dag_run WHERE dag_id = :d AND run_id = :r", d=dag_id, r=run_id)[0][0]


def ti(eng, dag_id, task_id, run_id="r1"):
    return sql(eng, "SELECT * FROM task_instance WHERE dag_id = :d AND run_id = :r AND task_id = :t",
               d=dag_id, r=run_id, t=task_id)[0]


def test_failed_task_inspected_log_read_cleared_downstream_rerun_and_the_run_succeeds(db_url, eng, cfg, tmp_path):
    # The worker does not beat while the commands below run: on a busy machine they may take
    # longer than the default threshold, and the scheduler's pass would declare it dead.
    cfg = load_config({"database_url": db_url, "home": str(tmp_path / "home"), "job_heartbeat_threshold": 3600})
    marker = tmp_path / "fixed"
    sync_source(eng, tmp_path / "dags", CHAIN.format(marker=marker))
    trigger(eng, "chain", "r1")
    worker = Worker(eng, cfg)
    try:
        run_until(eng, cfg, worker, lambda: run_state(eng, "chain") == "failed")
        # Inspect: the run list, the run, the TIs, one state, the log.
        runs = json.loads(ok(cli(db_url, "runs", "list", "--dag", "chain", "--state", "failed", "--json")))
        assert [(r["run_id"], r["state"], r["failed"]) for r in runs] == [("r1", "failed", 2)]
        assert json.loads(ok(cli(db_url, "runs", "list", "--state", "success", "--json"))) == []
        shown = ok(cli(db_url, "runs", "show", "chain", "r1"))
        assert "run r1 of chain: failed" in shown and "upstream_failed" in shown
        tis = json.loads(ok(cli(db_url, "tasks", "list", "chain", "r1", "--json")))
        assert {t["task_id"]: (t["state"], t["try_number"]) for t in tis} == \
            {"a": ("success", 1), "b": ("failed", 1), "c": ("upstream_failed", 0)}
        assert ok(cli(db_url, "tasks", "state", "chain", "r1", "b")).strip() == "failed"
        log = ok(cli(db_url, "logs", "chain", "r1", "b"))
        assert "b failing" in log and "try 1 of chain.b" in log
        assert "b failing" in ok(cli(db_url, "logs", "chain", "r1", "b", "--try", "1", "--follow"))
        refused(cli(db_url, "logs", "chain", "r1", "c"), "has not started a try")
        refused(cli(db_url, "logs", "chain", "r1", "b", "--try", "2"), "has no try 2")

        # Without a terminal and without --yes: shown, refused, nothing changed.
        before = snapshot(eng)
        r = cli(db_url, "tasks", "clear", "chain", "--run", "r1", "--task", "^b$", "--downstream")
        refused(r, "would clear 2 TI(s)", "--yes")
        assert "b" in r.stdout and "c" in r.stdout
        assert snapshot(eng) == before

        marker.write_text("ok")
        out = ok(cli(db_url, "tasks", "clear", "chain", "--run", "r1", "--task", "^b$", "--downstream", "--yes"))
        assert "cleared 2 TI(s) in 1 run(s)" in out
        assert ti_states(eng, "chain") == {"a": "success", "b": "none", "c": "none"}
        assert run_state(eng, "chain") == "running"
        assert ti(eng, "chain", "b").max_tries == 1  # a new try: try 1 done, retries 0

        run_until(eng, cfg, worker, lambda: run_state(eng, "chain") in ("success", "failed"))
    finally:
        worker.stop()
    assert run_state(eng, "chain") == "success"
    assert ti_states(eng, "chain") == {"a": "success", "b": "success", "c": "success"}
    assert (ti(eng, "chain", "a").try_number, ti(eng, "chain", "b").try_number) == (1, 2)  # a did not rerun
    assert "b ok" in ok(cli(db_url, "logs", "chain", "r1", "b"))
    assert "b failing" in ok(cli(db_url, "logs", "chain", "r1", "b", "--try", "1"))
    assert_history_invariant(eng)
    changes = sql(eng, "SELECT action, task_id, from_state, to_state FROM state_change ORDER BY id")
    assert [tuple(c) for c in changes] == [("clear", "b", "failed", "none"), ("clear", "c", "upstream_failed", "none"),
                                           ("clear", None, "failed", "running")]
    show = json.loads(ok(cli(db_url, "runs", "show", "chain", "r1", "--json")))
    assert show["run"]["state"] == "success" and len(show["changes"]) == 3
    # A log written on another host: one line naming the host and the path.
    sql(eng, "UPDATE task_instance SET hostname = 'worker-elsewhere', log_path = '/nonexistent/attempt=1.log' "
             "WHERE task_id = 'a'")
    refused(cli(db_url, "logs", "chain", "r1", "a"), "is on host worker-elsewhere (/nonexistent/attempt=1.log)",
            "read it there")


def _wait_running(eng, cfg, worker, dag_id, task_id):
    run_until(eng, cfg, worker, lambda: ti(eng, dag_id, task_id).state == "running"
              and any(c.row["task_id"] == task_id for c in worker.children))


def _stopped(worker, pid):
    worker.job.heartbeat_interval = 0  # the next pass beats: the stop request arrives with it
    return lambda: all(c.proc.pid != pid for c in worker.children)


def test_kill_and_clear_stop_the_running_try_through_its_worker(db_url, eng, cfg, tmp_path):
    marker = tmp_path / "go"
    sync_source(eng, tmp_path / "dags", SLOW.format(marker=marker))
    trigger(eng, "slow", "r1")
    worker = Worker(eng, cfg)
    try:
        # kill: the running try is stopped by its worker; t (downstream) never starts.
        _wait_running(eng, cfg, worker, "slow", "s")
        pid = worker.children[0].proc.pid
        follow = subprocess.Popen([sys.executable, "-m", "cli.main", "logs", "slow", "r1", "s", "--follow", "--poll",
                                   "0.05"], env={**os.environ, "ENGINE_DATABASE_URL": db_url}, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        out = ok(cli(db_url, "tasks", "kill", "slow", "r1", "s", "--reason", "stuck"))
        followed, errors = follow.communicate(timeout=120)  # --follow ends when the try is no longer running
        assert follow.returncode == 0 and "try 1 of slow.s" in followed, errors
        assert "running -> failed" in out
        row = ti(eng, "slow", "s")
        assert (row.state, row.state_reason) == ("failed", "stuck")
        run_until(eng, cfg, worker, _stopped(worker, pid))
        run_until(eng, cfg, worker, lambda: run_state(eng, "slow") == "failed")
        assert ti(eng, "slow", "s").state == "failed"  # the stale report changed nothing
        assert ti_states(eng, "slow") == {"s": "failed", "t": "upstream_failed"}
        assert "stop requested" in Path(row.log_path).read_text()
        refused(cli(db_url, "tasks", "kill", "slow", "r1", "s"), "nothing to change")

        # clear while running: restarting, stopped first, then a new try that runs alone.
        ok(cli(db_url, "tasks", "clear", "slow", "--run", "r1", "--yes"))
        _wait_running(eng, cfg, worker, "slow", "s")
        pid = worker.children[0].proc.pid
        out = ok(cli(db_url, "tasks", "clear", "slow", "--run", "r1", "--task", "^s$", "--yes"))
        assert "1 running try is being stopped by its worker first" in out
        assert ti(eng, "slow", "s").state == "restarting"
        marker.write_text("go")
        run_until(eng, cfg, worker, _stopped(worker, pid))
        run_until(eng, cfg, worker, lambda: run_state(eng, "slow") in ("success", "failed"))
    finally:
        worker.stop()
    assert run_state(eng, "slow") == "success"
    s = ti(eng, "slow", "s")
    assert s.try_number == 3
    tries = sql(eng, "SELECT try_number, state, start_date, end_date FROM task_instance_history "
                     "WHERE task_id = 's' ORDER BY try_number")
    assert [(t.try_number, t.state) for t in tries] == [(1, "failed"), (2, "failed"), (3, "success")]
    assert tries[2].start_date >= tries[1].end_date  # the new try started after the old one ended
    assert_history_invariant(eng)
    actions = [r[0] for r in sql(eng, "SELECT action FROM state_change WHERE task_id = 's' ORDER BY id")]
    assert actions == ["kill", "clear", "clear", "restarted"]


def test_mark_and_cancel_runs_and_tasks(db_url, eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", PLAIN)
    trigger(eng, "plain", "r1")
    drive(eng, cfg, outcomes={"x": 1})
    assert run_state(eng, "plain") == "failed"
    # mark the failed TI success: the run reopens, y runs, the run succeeds.
    out = ok(cli(db_url, "tasks", "mark", "success", "plain", "r1", "x"))
    assert "failed -> success" in out
    assert ti_states(eng, "plain") == {"x": "success", "y": "upstream_failed"}
    ok(cli(db_url, "tasks", "clear", "plain", "--run", "r1", "--task", "^y$", "--yes"))
    drive(eng, cfg)
    assert run_state(eng, "plain") == "success"
    out = ok(cli(db_url, "runs", "mark", "failed", "plain", "r1", "--reason", "bad data"))
    assert "run r1 of plain: failed" in out
    assert sql(eng, "SELECT state_reason FROM dag_run WHERE run_id = 'r1'")[0][0] == "bad data"
    refused(cli(db_url, "runs", "mark", "failed", "plain", "r1"), "already failed")

    # cancel a running run: its queued TI never starts; unstarted ones are skipped.
    trigger(eng, "plain", "r2")
    tick(eng, cfg)
    tick(eng, cfg)
    states = {r.task_id: r.state for r in sql(eng, "SELECT task_id, state FROM task_instance WHERE run_id = 'r2'")}
    assert states["x"] in ("scheduled", "queued") and states["y"] == "none"
    out = ok(cli(db_url, "runs", "cancel", "plain", "r2"))
    assert "run r2 of plain: failed; 2 unfinished TI(s) changed" in out
    assert claim(eng) == []  # the queued TI never starts
    states = {r.task_id: (r.state, r.state_reason) for r in
              sql(eng, "SELECT task_id, state, state_reason FROM task_instance WHERE run_id = 'r2'")}
    assert states == {"x": ("skipped", "cancel by an operator"), "y": ("skipped", "cancel by an operator")}
    drive(eng, cfg)
    assert run_state(eng, "plain", "r2") == "failed"

    # mark a running run success: its running TI's try ends as success; the late report is stale.
    trigger(eng, "plain", "r3")
    tick(eng, cfg)
    (running,) = [t for t in claim(eng) if t.run_id == "r3"]
    ok(cli(db_url, "runs", "mark", "success", "plain", "r3"))
    assert finish(eng, running, 1) is None
    assert {r.state for r in sql(eng, "SELECT state FROM task_instance WHERE run_id = 'r3'")} == {"success"}
    assert_history_invariant(eng)


def test_bad_input_is_one_line_and_changes_nothing(db_url, eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", PLAIN)
    trigger(eng, "plain", "r1")
    drive(eng, cfg)
    before = snapshot(eng)
    cases = [
        (("runs", "show", "nope", "r1"), "unknown DAG 'nope'"),
        (("runs", "show", "plain", "nope"), "has no run 'nope'"),
        (("runs", "list", "--dag", "nope"), "unknown DAG"),
        (("runs", "list", "--state", "weird"), "weird"),
        (("tasks", "list", "plain", "nope"), "has no run"),
        (("tasks", "state", "plain", "r1", "zz"), "has no TI of task 'zz'"),
        (("tasks", "state", "plain", "r1", "x", "--map-index", "3"), "map index 3"),
        (("logs", "plain", "r1", "zz"), "has no TI of task"),
        (("tasks", "clear", "nope", "--yes"), "unknown DAG"),
        (("tasks", "clear", "plain", "--run", "nope", "--yes"), "has no run"),
        (("tasks", "clear", "plain", "--task", "zz", "--yes"), "no task of DAG"),
        (("tasks", "clear", "plain", "--task", "(", "--yes"), "not a regular expression"),
        (("tasks", "mark", "success", "plain", "r1", "zz"), "has no TI of task"),
        (("tasks", "mark", "success", "plain", "r1", "x"), "already success"),
        (("tasks", "mark", "skipped", "plain", "r1", "x"), "skipped"),
        (("tasks", "kill", "plain", "r1", "x"), "nothing to change"),
        (("tasks", "kill", "nope", "r1", "x"), "unknown DAG"),
        (("runs", "cancel", "plain", "r1"), "already finished (success); nothing to cancel"),
        (("runs", "cancel", "plain", "nope"), "has no run"),
        (("runs", "mark", "success", "plain", "r1"), "already success"),
        (("runs", "mark", "success", "plain", "bad id!"), "run id"),
        (("dags", "trigger", "plain", "--logical-date", "yesterday"), "is not a date"),
        (("dags", "trigger", "plain", "--logical-date", "3000-01-02"), "out of range"),
        (("dags", "backfill", "plain", "--start", "2026-01-01", "--end", "2026-01-02"), "has no schedule"),
        (("dags", "backfill", "daily", "--start", "2026-01-05", "--end", "2026-01-01"), "before"),
        (("dags", "backfill", "nope", "--start", "2026-01-01", "--end", "2026-01-02"), "unknown DAG"),
        (("tasks", "test", "plain", "zz"), "has no task 'zz'"),
        (("dags", "test", "nope"), "unknown DAG"),
    ]
    for args, needle in cases:
        refused(cli(db_url, *args), needle)
    assert snapshot(eng) == before
    assert ok(cli(db_url, "tasks", "clear", "plain", "--run", "r1", "--only-failed", "--yes")).strip() == \
        "nothing to clear"


def test_trigger_logical_date_and_backfill(db_url, eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", PLAIN)
    out = ok(cli(db_url, "dags", "trigger", "plain", "--logical-date", "2026-02-01"))
    assert "manual__2026-02-01T00:00:00.000000+00:00" in out
    ld = sql(eng, "SELECT logical_date FROM dag_run WHERE dag_id = 'plain'")[0][0]
    assert ld.replace(tzinfo=timezone.utc) == datetime(2026, 2, 1, tzinfo=timezone.utc)

    with db.connect(eng) as conn:  # one step, at most 2 active
        step = db.run(conn, "backfill", dag_id="daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
                      end_date=datetime(2026, 1, 5, tzinfo=timezone.utc), max_active=2, rerun_failed=False, now=None).one()
    assert (step.created, step.active, step.remaining) == (2, 2, 3)
    out = ok(cli(db_url, "dags", "backfill", "daily", "--start", "2026-01-01", "--end", "2026-01-05"))
    assert "3 run(s) created" in out
    runs = sql(eng, "SELECT run_id, run_type FROM dag_run WHERE dag_id = 'daily' AND run_type = 'backfill' ORDER BY logical_date")
    assert [r.run_id for r in runs] == [f"backfill__2026-01-0{d}T00:00:00+00:00" for d in range(1, 6)]
    assert {r.run_type for r in runs} == {"backfill"}
    drive(eng, cfg, outcomes={"d": 1})
    assert set(r[0] for r in sql(eng, "SELECT state FROM dag_run WHERE run_type = 'backfill'")) == {"failed"}
    out = ok(cli(db_url, "dags", "backfill", "daily", "--start", "2026-01-01", "--end", "2026-01-05"))
    assert "0 run(s) created, 0 rerun" in out  # nothing twice
    out = ok(cli(db_url, "dags", "backfill", "daily", "--start", "2026-01-02", "--end", "2026-01-03",
                 "--rerun-failed"))
    assert "2 failed run(s) rerun" in out
    drive(eng, cfg)
    states = [r[0] for r in sql(eng, "SELECT state FROM dag_run WHERE run_type = 'backfill' ORDER BY logical_date")]
    assert states == ["failed", "success", "success", "failed", "failed"]
    assert_history_invariant(eng)


@pytest.mark.parametrize("second_answer", [True, False])
def test_tasks_clear_clears_what_was_confirmed_or_asks_again(db_url, eng, cfg, tmp_path, monkeypatch, second_answer):
    """`engine tasks clear` shows the TIs, asks, then clears: the services go on while the prompt
    waits. Here y is marked failed meanwhile. The clear is checked against what was shown in its
    own transaction: rolled back, the new list shown, asked again; `y` clears that list, `n`
    clears nothing. (Before: the clear re-selected by the filter and cleared y from its new state,
    never shown to the operator.)"""
    import types

    import click
    from cli import tasks as tasks_module
    sync_source(eng, tmp_path / "dags", PLAIN)
    trigger(eng, "plain", "r1")
    drive(eng, cfg)
    assert ti_states(eng, "plain") == {"x": "success", "y": "success"}
    asked = []

    def confirm(text, abort=False, **kw):
        asked.append(text)
        if len(asked) == 1:   # the operator reads the list; meanwhile y is marked failed
            ok(cli(db_url, "tasks", "mark", "failed", "plain", "r1", "y"))
            return True
        if not second_answer:
            raise click.exceptions.Abort()
        return True
    monkeypatch.setattr(tasks_module, "sys", types.SimpleNamespace(stdin=types.SimpleNamespace(isatty=lambda: True)))
    monkeypatch.setattr(click, "confirm", confirm)
    r = cli(db_url, "tasks", "clear", "plain", "--run", "r1", "--task", "^x$", "--downstream")
    assert asked == ["clear these 2 TI(s)?", "clear these 2 TI(s)?"], r.output
    assert "changed while the prompt waited" in r.stdout
    if second_answer:
        assert r.exit_code == 0 and "cleared 2 TI(s) in 1 run(s)" in r.stdout, r.output
        assert ti_states(eng, "plain") == {"x": "none", "y": "none"}
        changes = sql(eng, "SELECT task_id, from_state, to_state FROM state_change WHERE task_id = 'y' ORDER BY id")
        assert [tuple(c) for c in changes][-2:] == [("y", "success", "failed"), ("y", "failed", "none")]
    else:
        assert r.exit_code != 0
        assert ti_states(eng, "plain") == {"x": "success", "y": "failed"}   # nothing cleared


def test_dags_test_and_tasks_test(db_url, eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", PLAIN)
    before = snapshot(eng)
    r = cli(db_url, "tasks", "test", "plain", "y")
    assert r.exit_code == 0 and "y\n" in r.stdout and "exited with 0" in r.stderr, r.output
    assert snapshot(eng) == before  # nothing recorded
    out = ok(cli(db_url, "dags", "test", "plain", "--logical-date", "2026-03-01"))
    assert "== x try 1: success" in out and "== y try 1: success" in out and ": success in" in out
    assert sql(eng, "SELECT state, logical_date FROM dag_run WHERE dag_id = 'plain'")[0][0] == "success"


def test_dags_test_stops_when_the_dag_is_paused_meanwhile(eng, cfg, tmp_path, monkeypatch):
    """`engine dags test` checks that the DAG is not paused, then triggers its run; an operator's
    `engine dags pause` in between (or during the test) left the run unable to start or go on,
    and the command waited out --timeout (an hour by default). Now it stops with one line."""
    from engine.errors import EngineError
    from engine.testing import test_dag
    sync_source(eng, tmp_path / "dags", PLAIN)
    real = db.run

    def run(conn, name, /, **params):
        if name == "run_get":   # (the first pass of the test's loop: the pause has committed)
            sql(eng, "UPDATE dag SET is_paused = true WHERE dag_id = 'plain'")
        return real(conn, name, **params)
    monkeypatch.setattr(db, "run", run)
    with pytest.raises(EngineError, match=r"DAG 'plain' was paused during the test; its run test__\S+ stays \w+ "
                                          r"until `engine dags unpause plain`"):
        test_dag(eng, cfg, "plain", None, timeout=60)


def test_a_worker_that_claimed_a_ti_while_a_clear_waited_keeps_its_try_stopping_first(eng):
    """A clear of run1 waits for TI 1's row (held by another transaction); meanwhile a worker
    registers and starts TI 2. When the clear gets there, TI 2 runs under a live worker: it goes
    to `restarting` (the worker stops the try first), not to `none`, which would let a second
    try start beside the first. (PostgreSQL's clear_tis_v2 read the worker's job from the
    snapshot its cursor took before the wait, where the new worker did not exist: `none`;
    clear_tis_v3, revision 0047, reads it after the TI is locked.)"""
    from tests.reference import TI, World
    from tests.helpers import start_in_thread, until_waiting_or_done
    from tests.world import load_world
    if db.dialect_dir(eng) == "mysql":
        pytest.skip("MySQL/MariaDB's clear holds TI 2 already while it waits for TI 1 (no worker can start it)")
    load_world(eng, World(pools={"default_pool": (128, False)}, parallelism={"default": None},
                          dags={"d": (None, False)}, tasks={("d", "t"): (None, None)}, runs={1: ("d", "running", 0)},
                          tis=[TI(1, "d", 1, "t", 0, "success", 1, "default_pool", 1),
                               TI(2, "d", 1, "t", 1, "queued", 1, "default_pool", 1)]))
    holder = eng.connect()
    tx = holder.begin()
    holder.execute(sa.text("SELECT id FROM task_instance WHERE id = 1 FOR UPDATE")).all()
    outcome: dict = {}
    try:
        clear = start_in_thread(eng, lambda c: {r.ti_id: r.new_state for r in db.run(
            c, "clear_tis", dag_id="d", run_id="run1", task_regex=None, downstream=False, upstream=False,
            only_failed=False, dry_run=False, reason="op", now=None).all()}, outcome, "clear")
        assert until_waiting_or_done(eng, clear, outcome, "clear_pid"), outcome   # at TI 1
        with db.connect(eng) as c:
            job = db.run(c, "register_job", kind="worker", hostname="w2", pid=2).scalar_one()
        sql(eng, "UPDATE task_instance SET state = 'running', try_number = 1, worker_job_id = :j WHERE id = 2", j=job)
        tx.commit()
    finally:
        holder.close()
        clear.join(60)
    assert outcome.get("clear") == {1: "none", 2: "restarting"}, outcome
    assert sql(eng, "SELECT state, worker_job_id FROM task_instance WHERE id = 2")[0] == ("restarting", job)


def test_kill_clear_and_cancel_close_the_trigger_of_a_deferred_ti(db_url, eng):
    """A deferred TI's try ends in the operator's command and its trigger is closed with the
    reason as its error (fired_at set: the triggerer drops it, no event resumes the TI), on both
    dialects (MySQL/MariaDB: clear_tis_v4, set_ti_state_v3 and set_run_state_v3 reach the trigger
    from their selection). Another DAG's deferred TI keeps its trigger open."""
    from datetime import datetime, timezone
    from tests.reference import TI, World
    from tests.world import load_world
    runs = {1: ("d", "running", 1), 2: ("d", "running", 2), 3: ("d", "running", 3), 4: ("o", "running", 4)}
    load_world(eng, World(pools={"default_pool": (128, False)}, parallelism={"default": None},
                          dags={"d": (None, False), "o": (None, False)},
                          tasks={("d", "t"): (None, None), ("o", "t"): (None, None)}, runs=runs,
                          tis=[TI(10 * r + 1, runs[r][0], r, "t", 0, "deferred", 1, "default_pool", 1) for r in runs]))
    table = "`trigger`" if db.dialect_dir(eng) == "mysql" else '"trigger"'
    for r in runs:
        sql(eng, f"INSERT INTO {table} (id, classpath, kwargs, ti_id, created_at) VALUES (:g, 'x.Wait', '{{}}', :t, :at)",
            g=100 * r + 1, t=10 * r + 1, at=datetime(2026, 1, 1, tzinfo=timezone.utc))
        sql(eng, "UPDATE task_instance SET trigger_id = :g, try_number = 1 WHERE id = :t", g=100 * r + 1, t=10 * r + 1)
    ok(cli(db_url, "tasks", "kill", "d", "run1", "t", "--reason", "killed here"))
    ok(cli(db_url, "tasks", "clear", "d", "--run", "run2", "--yes", "--reason", "cleared here"))
    ok(cli(db_url, "runs", "cancel", "d", "run3", "--reason", "cancelled here"))
    assert dict(sql(eng, "SELECT id, state FROM task_instance ORDER BY id")) == {
        11: "failed", 21: "none", 31: "failed", 41: "deferred"}
    closed = {r.id: (r.fired_at is not None, r.error) for r in sql(eng, f"SELECT id, fired_at, error FROM {table}")}
    assert closed == {101: (True, "killed here"), 201: (True, "cleared here"), 301: (True, "cancelled here"),
                      401: (False, None)}
    assert sorted(r[0] for r in sql(eng, "SELECT ti_id FROM task_instance_history")) == [11, 21, 31]


@pytest.mark.parametrize("fails", [1, 3])
def test_an_operator_command_runs_again_after_a_deadlock(db_url, eng, cfg, tmp_path, monkeypatch, fails):
    """A deadlock (PostgreSQL 40P01, MySQL/MariaDB 1213: the server undid the command's whole
    transaction because another one was in its way, e.g. a worker's heartbeat holding the TI, or a
    TI entering `deferred` beside a change of its pool) is not the operator's to repeat: `tasks
    mark`, `tasks clear`, `runs mark`, `pools set` and `pools delete` run their transaction again,
    up to three times in all (db.in_transaction). Here each command's procedure raises a
    deadlock at its first `fails` calls, before it changes anything: with 1 every command goes
    through and changes each TI once (one state_change row each); with 3 each ends in the one-line
    error and nothing is changed."""
    import psycopg
    import pymysql
    sync_source(eng, tmp_path / "dags", PLAIN)
    trigger(eng, "plain", "r1")
    drive(eng, cfg, outcomes={"x": 1})
    assert ti_states(eng, "plain") == {"x": "failed", "y": "upstream_failed"}
    real, calls = db.run, []

    def deadlocking(conn, query, /, **params):
        if query in ("set_ti_state", "clear_tis", "set_run_state", "pools_set", "pools_delete") \
                and not params.get("dry_run"):
            calls.append(query)
            if calls.count(query) <= fails:
                orig = (pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock; try restarting "
                                                           "transaction") if db.dialect_dir(conn) == "mysql"
                        else psycopg.errors.DeadlockDetected("deadlock detected"))
                raise sa.exc.OperationalError(f"CALL {query}", {}, orig)
        return real(conn, query, **params)

    monkeypatch.setattr(db, "run", deadlocking)
    results = [cli(db_url, "tasks", "mark", "success", "plain", "r1", "x"),
               cli(db_url, "tasks", "clear", "plain", "--run", "r1", "--task", "^y$", "--yes"),
               cli(db_url, "runs", "mark", "success", "plain", "r1"),
               cli(db_url, "pools", "set", "p1", "5", "--include-deferred")]
    pools_after_set = [r[0] for r in sql(eng, "SELECT name FROM pool ORDER BY name")]
    results.append(cli(db_url, "pools", "delete", "p1"))
    monkeypatch.setattr(db, "run", real)
    changes = sql(eng, "SELECT action, task_id, from_state, to_state FROM state_change WHERE run_id = 'r1' "
                       "ORDER BY id")
    if fails == 1:
        for r in results:
            ok(r)
        assert calls == ["set_ti_state"] * 2 + ["clear_tis"] * 2 + ["set_run_state"] * 2 + ["pools_set"] * 2 \
            + ["pools_delete"] * 2
        assert "p1" in pools_after_set and "p1" not in [r[0] for r in sql(eng, "SELECT name FROM pool")]
        assert ti_states(eng, "plain") == {"x": "success", "y": "success"}
        assert [tuple(c) for c in changes] == [
            ("mark_success", "x", "failed", "success"), ("mark_success", None, "failed", "running"),
            ("clear", "y", "upstream_failed", "none"), ("mark_success", "y", "none", "success"),
            ("mark_success", None, "running", "success")]
    else:
        for r in results:
            refused(r, "another transaction was in the way", "run the command again")
        assert calls == ["set_ti_state"] * 3 + ["clear_tis"] * 3 + ["set_run_state"] * 3 + ["pools_set"] * 3 \
            + ["pools_delete"] * 3
        assert "p1" not in pools_after_set
        assert ti_states(eng, "plain") == {"x": "failed", "y": "upstream_failed"}
        assert changes == []


@pytest.mark.parametrize("held", ["reservation", "ti"])
def test_mysql_operator_commands_wait_for_no_writer_of_another_dags_rows(eng, held):
    """MySQL/MariaDB: another transaction holds, uncommitted, a row of another DAG (a reservation
    a scheduler is inserting, or a TI with a reservation that a worker is finishing). Clearing,
    marking a task and marking a run of DAG d must not wait for it: they change d's rows only.
    InnoDB locks what a multi-table UPDATE or DELETE reads as well as what it changes, and the v2
    commands left their join order to the optimizer: pointed at clear_tis_v2 and
    set_run_state_v2, this fails with error 1205 on MariaDB 10.11 (innodb_lock_wait_timeout 2 s
    here); clear_tis_v4, set_ti_state_v3 and set_run_state_v3 lead those statements by their
    selection (revision 0060)."""
    from tests.reference import TI, Reservation, World
    from tests.world import load_world
    if db.dialect_dir(eng) != "mysql":
        pytest.skip("PostgreSQL locks only the rows a statement changes")
    # DAG d: runs 1-3, 30 scheduled TIs each (ids 100-129, 200-229, 300-329), TIs 100 and 300
    # reserved. DAG o: runs 4-13, two scheduled TIs each (ids 400, 401, ... 1300, 1301), the first
    # of each run reserved. (Each command selects 30 TIs, more than there are reservations: so the
    # optimizer led v2's statements with pool_reservation.)
    runs = {r: ("d" if r <= 3 else "o", "running", r) for r in range(1, 14)}
    tis = [TI(100 * r + m, runs[r][0], r, "t", m, "scheduled", 1, "default_pool", 1)
           for r in range(1, 14) for m in range(30 if r <= 3 else 2)]
    reserved = [100, 300] + [100 * r for r in range(4, 14)]
    load_world(eng, World(pools={"default_pool": (128, False)}, parallelism={"default": None},
                          dags={"d": (None, False), "o": (None, False)},
                          tasks={("d", "t"): (None, None), ("o", "t"): (None, None)}, runs=runs, tis=tis,
                          reservations=[Reservation(i, "default_pool", 1, "wide", 0) for i in reserved]))
    writer = eng.connect()
    tx = writer.begin()
    if held == "reservation":   # a scheduler's queue_tis reserving for TI 401, not committed yet
        writer.execute(sa.text("INSERT INTO pool_reservation (ti_id, pool, slots, reason, since) "
                               "VALUES (401, 'default_pool', 1, 'wide', UTC_TIMESTAMP(6))"))
    else:                       # a worker's transaction on TI 400 (reserved), not committed yet
        writer.execute(sa.text("UPDATE task_instance SET updated_at = UTC_TIMESTAMP(6) WHERE id = 400"))
    try:
        with eng.connect() as c:
            c.execute(sa.text("SET SESSION innodb_lock_wait_timeout = 2"))
            cleared = db.run(c, "clear_tis", dag_id="d", run_id="run1", task_regex=None, downstream=False,
                             upstream=False, only_failed=False, dry_run=False, reason="op", now=None).all()
            marked = db.run(c, "set_ti_state", dag_id="d", run_id="run2", task_id="t", map_index=None,
                            new_state="success", action="mark_success", reason="op", now=None).all()
            failed = db.run(c, "set_run_state", dag_id="d", run_id="run3", action="mark_failed", reason="op",
                            now=None).one()
            kept = sorted(r[0] for r in c.execute(sa.text("SELECT ti_id FROM pool_reservation")))
            c.commit()
    finally:
        tx.rollback()
        writer.close()
    assert {(r.ti_id, r.new_state) for r in cleared} == {(100 + m, "none") for m in range(30)}
    assert {(r.ti_id, r.new_state) for r in marked} == {(200 + m, "success") for m in range(30)}
    assert (failed.state, failed.tis_changed) == ("failed", 30)
    assert kept == [100 * r for r in range(4, 14)]   # d's two reservations went, o's stayed
    states = dict(sql(eng, "SELECT id, state FROM task_instance WHERE dag_id = 'd'"))
    assert states == {100 * r + m: s for r, s in ((1, "none"), (2, "success"), (3, "skipped")) for m in range(30)}
    assert set(sql(eng, "SELECT state FROM task_instance WHERE dag_id = 'o'")) == {("scheduled",)}


def test_runs_list_gives_the_newest_runs_first_with_their_counts_within_the_limit(db_url, eng, cfg, tmp_path):
    """The runs are chosen first (filters, newest first, the limit), then their TIs counted (the
    named query reads run_overview for the chosen runs only: a LATERAL on PostgreSQL, a join by
    key on MySQL/MariaDB)."""
    sync_source(eng, tmp_path / "dags", CHAIN.format(marker=tmp_path / "m"))
    sync_source(eng, tmp_path / "dags2", PLAIN)
    made = [("chain", "r1"), ("plain", "p1"), ("chain", "r2"), ("plain", "p2"), ("chain", "r3")]
    for i, (dag_id, run_id) in enumerate(made):
        trigger(eng, dag_id, run_id)
        sql(eng, "UPDATE dag_run SET created_at = :t WHERE dag_id = :d AND run_id = :r",
            t=datetime(2026, 1, 1, 0, i, tzinfo=timezone.utc), d=dag_id, r=run_id)
    sql(eng, "UPDATE dag SET is_paused = :p WHERE dag_id = 'daily'", p=True)  # (no run of its own)
    tick(eng, cfg)  # the runs start: chain's have 3 TIs, plain's 2
    sql(eng, "UPDATE dag_run SET state = 'failed' WHERE run_id = 'r2'")
    tis = dict(sql(eng, "SELECT r.run_id, COUNT(t.id) FROM dag_run r LEFT JOIN task_instance t ON t.dag_run_id = r.id "
                        "GROUP BY r.run_id"))

    def listed(*args):
        return [(r["dag_id"], r["run_id"], r["tis"]) for r in json.loads(ok(cli(db_url, "runs", "list", "--json", *args)))]

    assert (tis["r1"], tis["p1"]) == (3, 2)
    assert listed("--limit", "2") == [("chain", "r3", tis["r3"]), ("plain", "p2", tis["p2"])]
    assert listed() == [(d, r, tis[r]) for d, r in reversed(made)]
    assert listed("--dag", "chain", "--limit", "2") == [("chain", "r3", tis["r3"]), ("chain", "r2", tis["r2"])]
    assert listed("--state", "failed") == [("chain", "r2", tis["r2"])]
    assert listed("--dag", "plain", "--state", "failed") == []
