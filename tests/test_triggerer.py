"""The triggerer: in-process (asyncio passes against the real database) and as real processes
(`engine triggerer` killed with kill -9 and taken over; worker + triggerer + tick end to end)."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from engine.dagsync import sync
from engine.triggerer import Triggerer, _moment
from engine.triggers import DateTimeTrigger
from tests.cluster import CALM, FAST, REPO, Cluster
from tests.deferral import FAR, cli, defer, fire, quoted, states
from tests.helpers import claim, sql, sync_source, tick, trigger


class NotWhen(DateTimeTrigger):
    def fire_at(self):
        return "soon"


USER_TRIGGERS = '''
import asyncio
from engine.triggers import BaseTrigger


class Boom(BaseTrigger):
    def __init__(self, message):
        self.message = message

    async def run(self):
        await asyncio.sleep(0)
        raise ValueError(self.message)


class Countdown(BaseTrigger):
    def __init__(self, n):
        self.n = n

    async def run(self):
        for _ in range(self.n):
            await asyncio.sleep(0.01)
        yield {"counted": self.n}
'''

THREE = """
    with DAG("d", max_active_tasks=None):
        for name in ("t1", "t2", "t3"):
            PythonTask(name, python_callable="x:y", pool="p")
"""


def three_claimed(eng, cfg, tmp_path, include_deferred=True) -> dict:
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('p', 10, :i)", i=include_deferred)
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "mytriggers.py").write_text(USER_TRIGGERS)
    sync_source(eng, tmp_path / "dags", THREE)
    trigger(eng, "d")
    tick(eng, cfg)
    return {ti.task_id: ti for ti in claim(eng)}


def ti_row(eng, ti):
    return sql(eng, "SELECT state, state_reason, trigger_id FROM task_instance WHERE id = :i", i=ti.ti_id)[0]


async def passes(trig: Triggerer, until, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < end, "the triggerer did not get there in time"
        await trig.run_once()
        await asyncio.sleep(0.05)


def test_triggerer_runs_time_user_and_failing_triggers(eng, cfg, tmp_path):
    tis = three_claimed(eng, cfg, tmp_path)
    defer(eng, tis["t1"], "engine.triggers:TimeDeltaTrigger", {"seconds": 0.3})
    defer(eng, tis["t2"], "mytriggers:Countdown", {"n": 3})
    defer(eng, tis["t3"], "mytriggers:Boom", {"message": "boom"})
    trig = Triggerer(eng, cfg)

    async def main():
        await passes(trig, lambda: states(eng, "d").get("deferred", 0) == 0)
        await trig.stop()
    asyncio.run(main())

    assert states(eng, "d") == {"queued": 2, "failed": 1}
    assert "trigger failed: ValueError: boom" in ti_row(eng, tis["t3"]).state_reason
    rows = {r.id: r for r in sql(eng, f"SELECT id, triggerer_job_id, created_at, fired_at, event "
                                      f"FROM {quoted(eng, 'trigger')}")}
    assert {r.triggerer_job_id for r in rows.values()} == {trig.job.id}
    t1 = rows[ti_row(eng, tis["t1"]).trigger_id]
    assert (t1.fired_at - t1.created_at).total_seconds() >= 0.3  # by the database clock
    t2 = rows[ti_row(eng, tis["t2"]).trigger_id]
    assert (json.loads(t2.event) if isinstance(t2.event, str) else t2.event) == {"counted": 3}
    assert sql(eng, "SELECT state FROM job WHERE id = :j", j=trig.job.id) == [("success",)]


def test_time_triggers_are_timers_not_tasks(eng, cfg, tmp_path):
    """Time triggers wait in one heap (no asyncio task each): the due one fires with the event
    its run() would return, one fired elsewhere is dropped, a subclass with its own run() and
    every other trigger keep a task; the capacity counts both."""
    tis = three_claimed(eng, cfg, tmp_path)
    defer(eng, tis["t1"], "engine.triggers:TimeDeltaTrigger", {"seconds": 0.3})
    defer(eng, tis["t2"])  # a DateTimeTrigger far away
    defer(eng, tis["t3"], "engine.triggers:EventTrigger", {"key": "k"})
    trig = Triggerer(eng, cfg)

    async def main():
        first = await trig.run_once()
        assert (first["claimed"], first["running"], len(trig.timers), len(trig.tasks)) == (3, 3, 2, 1)
        with pytest.raises(TypeError, match="NotWhen.fire_at.. returned str"):  # fails its load, not the clock
            _moment(NotWhen(FAR))
        far = ti_row(eng, tis["t2"]).trigger_id
        fire(eng, far, {"elsewhere": True})  # fired by someone else: this triggerer drops its timer
        await passes(trig, lambda: states(eng, "d").get("queued", 0) == 2)
        assert far not in trig.timers and list(trig.tasks) == [ti_row(eng, tis["t3"]).trigger_id]
        await trig.stop()
        assert (trig.timers, trig.tasks, trig._clock_task) == ({}, {}, None)
    asyncio.run(main())

    g = sql(eng, f"SELECT created_at, fired_at, event FROM {quoted(eng, 'trigger')} WHERE id = :i",
            i=ti_row(eng, tis["t1"]).trigger_id)[0]
    event = json.loads(g.event) if isinstance(g.event, str) else g.event
    moment = datetime.fromisoformat(event["moment"])
    assert moment >= g.created_at.replace(tzinfo=moment.tzinfo) + timedelta(seconds=0.3)  # its fire_at(), as run()
    assert (g.fired_at - g.created_at).total_seconds() >= 0.3  # by the database clock


def test_event_trigger_via_engine_events_send_and_timeout(eng, cfg, tmp_path, db_url):
    tis = three_claimed(eng, cfg, tmp_path, include_deferred=False)
    defer(eng, tis["t1"], "engine.triggers:EventTrigger", {"key": "batch-ready"})
    defer(eng, tis["t2"], "engine.triggers:EventTrigger", {"key": "other"})
    defer(eng, tis["t3"], "engine.triggers:EventTrigger", {"key": "never"}, timeout=30)
    trig = Triggerer(eng, cfg)

    async def main():
        first = await trig.run_once()
        assert (first["claimed"], first["running"]) == (3, 3)
        code, out = cli(db_url, "events", "send", "batch-ready", "--payload", '{"rows": 3}')
        assert code == 0 and "1 deferred TI(s) resumed" in out, out
        assert ti_row(eng, tis["t1"]).state == "scheduled"  # pool without include_deferred: boosted
        second = await trig.run_once()
        assert (second["cancelled"], second["running"]) == (1, 2)  # it drops what fired elsewhere
        # The timeout of t3 passes (a clock injected 31 s ahead, not a sleep: the machine may be slow).
        await trig.run_once(now=datetime.now(timezone.utc) + timedelta(seconds=31))
        assert ti_row(eng, tis["t3"]).state == "failed"
        assert (await trig.run_once())["running"] == 1
        await trig.stop()
    asyncio.run(main())

    assert "timed out" in ti_row(eng, tis["t3"]).state_reason
    tick(eng, cfg)
    (resumed,) = claim(eng)
    assert (resumed.task_id, resumed.event, resumed.try_number) == ("t1", {"rows": 3}, 1)
    # Stopped cleanly: the trigger still waiting was handed back for another triggerer.
    left = sql(eng, f"SELECT triggerer_job_id FROM {quoted(eng, 'trigger')} WHERE fired_at IS NULL")
    assert left == [(None,)]
    assert cli(db_url, "events", "send", "batch-ready")[1].startswith("event batch-ready: 0 deferred")


MANY = """
    with DAG("many", max_active_tasks=None):
        PythonTask("w", python_callable="x:y", pool="p").expand(i=list(range(20)))
"""


def wait_for(what, cond, timeout, cluster=None):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            logs = "".join(f"\n--- {p.name}\n{p.log_text()[-3000:]}" for p in cluster.procs) if cluster else ""
            raise AssertionError(f"timed out waiting for {what}{logs}")
        time.sleep(0.1)


def test_killed_triggerer_is_taken_over_nothing_lost_nothing_fired_twice(eng, cfg, db_url, tmp_path):
    """20 deferred TIs; triggerer A fires the first 10 (due at once), is killed with kill -9
    while it holds the other 10 (FileTriggers whose file is created once A is dead); triggerer B
    takes them over once A's heartbeat is older than the threshold (3 s) and fires them. Each TI
    resumes exactly once."""
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('p', 30, true)")
    sync_source(eng, tmp_path / "dags", MANY)
    trigger(eng, "many")
    tick(eng, cfg)
    now = sql(eng, "SELECT now()")[0][0]
    later = tmp_path / "later"
    for ti in claim(eng):
        if ti.map_index < 10:
            defer(eng, ti, kwargs={"moment": now.isoformat()})
        else:
            defer(eng, ti, "engine.triggers:FileTrigger", {"path": str(later), "poke_interval": 0.1})
    fast = {"ENGINE_JOB_HEARTBEAT_THRESHOLD": "3", "ENGINE_TRIGGERER_POLL_INTERVAL": "0.2"}
    cluster = Cluster(db_url, tmp_path / "cluster", env=fast)
    tq = quoted(eng, "trigger")
    try:
        a = cluster.start("triggerer")
        wait_for("A to fire the first 10", lambda: states(eng, "many").get("queued", 0) == 10, 60, cluster)
        held = sql(eng, f"SELECT count(*) FROM {tq} g JOIN job j ON j.id = g.triggerer_job_id "
                        f"WHERE j.pid = :pid AND g.fired_at IS NULL", pid=a.popen.pid)[0][0]
        assert held == 10
        cluster.kill9(a)
        later.write_text("now")
        b = cluster.start("triggerer")
        wait_for("B to take over and fire the rest", lambda: states(eng, "many") == {"queued": 20}, 60, cluster)
    finally:
        codes = cluster.stop()
    assert codes == {"triggerer2": 0}, b.log_text()
    with eng.connect() as c:
        jobs = dict(c.execute(sa.text("SELECT pid, state FROM job WHERE kind = 'triggerer'")).all())
    assert jobs == {a.popen.pid: "failed", b.popen.pid: "success"}  # A was declared dead by B's pass
    # Not taken over before A's last heartbeat was 3 s old (both by the database clock).
    (last_beat,) = sql(eng, "SELECT latest_heartbeat FROM job WHERE pid = :pid", pid=a.popen.pid)[0]
    taken = sql(eng, f"SELECT fired_at FROM {tq} WHERE classpath = 'engine.triggers:FileTrigger'")
    assert len(taken) == 10 and all((f - last_beat).total_seconds() >= 3 for (f,) in taken), (last_beat, taken)
    fired_by_b = [line for line in b.log_text().splitlines() if "fired -> queued" in line]
    assert len(fired_by_b) == 10 and len(set(fired_by_b)) == 10, b.log_text()
    assert sql(eng, f"SELECT count(*) FROM {tq} WHERE fired_at IS NOT NULL AND error IS NULL")[0][0] == 20
    assert sql(eng, "SELECT count(*) FROM task_instance WHERE try_number = 1 AND next_method = 'resume'")[0][0] == 20


E2E_DAG = """
from engine import DAG, PythonTask

with DAG("e2e_defer", max_active_tasks=None):
    wait = PythonTask("wait", python_callable="defer_tasks:start", op_kwargs={{"out": "{out}"}}, pool="p")
    after = PythonTask("after", python_callable="defer_tasks:after", op_kwargs={{"out": "{out}"}})
    wait >> after
"""

E2E_TASKS = '''
from engine import Defer, TimeDeltaTrigger


def start(out):
    with open(out, "a") as f:
        f.write("started\\n")
    raise Defer(trigger=TimeDeltaTrigger(seconds=1), method="resume", kwargs={"out": out, "n": 7}, timeout=60)


def resume(event, out, n):
    with open(out, "a") as f:
        f.write(f"resumed {n} {sorted(event)}\\n")
    return "ok"


def after(out):
    with open(out, "a") as f:
        f.write("after\\n")
'''


def test_end_to_end_worker_triggerer_and_tick_processes(eng, db_url, tmp_path):
    out = tmp_path / "out.txt"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "pipeline.py").write_text(E2E_DAG.format(out=out))
    (dags / "defer_tasks.py").write_text(textwrap.dedent(E2E_TASKS))
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('p', 1, false)")
    sync(eng, dags)
    trigger(eng, "e2e_defer")
    cluster = Cluster(db_url, tmp_path / "cluster", env={"ENGINE_TRIGGERER_POLL_INTERVAL": "0.2", **CALM})
    env = {**os.environ, **FAST, "ENGINE_DATABASE_URL": db_url, "PYTHONPATH": str(REPO),
           "ENGINE_HOME": str(tmp_path / "cluster" / "home"), **cluster.env}
    try:
        cluster.start("worker")
        cluster.start("triggerer")
        end = time.monotonic() + 60
        while sql(eng, "SELECT state FROM dag_run")[0][0] in ("queued", "running") and time.monotonic() < end:
            r = subprocess.run([sys.executable, "-m", "cli.main", "tick"], env=env, capture_output=True, text=True,
                               timeout=60)
            assert r.returncode == 0, r.stderr
            time.sleep(0.2)
    finally:
        codes = cluster.stop()
    logs = "".join(f"\n--- {p.name}\n{p.log_text()[-3000:]}" for p in cluster.procs)
    assert sql(eng, "SELECT state FROM dag_run") == [("success",)], logs
    assert codes == {"worker1": 0, "triggerer1": 0}, logs
    assert out.read_text() == "started\nresumed 7 ['moment']\nafter\n"
    hist = sql(eng, "SELECT task_id, try_number, state FROM task_instance_history ORDER BY id")
    assert [tuple(h) for h in hist] == [("wait", 1, "success"), ("after", 1, "success")]
    (log_path,) = sql(eng, "SELECT log_path FROM task_instance WHERE task_id = 'wait'")[0]
    text = Path(log_path).read_text()
    assert "Deferred:" in text and "resuming try 1" in text and "Resuming in resume" in text



def test_idle_triggerer_without_notifications_backs_off_to_listen_poll_interval(eng, cfg, monkeypatch):
    """MariaDB (or PostgreSQL while LISTEN is lost): an idle triggerer's passes come 50 ms after
    the last, doubling past triggerer_poll_interval up to listen_poll_interval (as the scheduler's
    and the worker's, tests/test_latency.py). The loop's clock and its waits are faked: the test
    reads the waits it asks for, never how long they took."""
    from engine import triggerer as triggerer_module
    from engine import wakeup

    monkeypatch.setattr(wakeup.Listener, "open", lambda self: False)   # no notifications
    cfg.triggerer_poll_interval, cfg.listen_poll_interval = 0.1, 0.4
    clock, waits = [1000.0], []

    class Clock:  # the triggerer module's `time`: monotonic() is the fake clock
        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def monotonic():
            return clock[0]

    async def wait_for(awaitable, timeout):
        awaitable.close()                  # never awaited: the wait "times out" at once
        waits.append(round(timeout, 6))
        clock[0] += timeout
        raise asyncio.TimeoutError

    monkeypatch.setattr(triggerer_module, "time", Clock())
    monkeypatch.setattr(asyncio, "wait_for", wait_for)
    asyncio.run(Triggerer(eng, cfg).loop(max_passes=6))                # six idle passes
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.4, 0.4]


def test_fires_reported_on_two_lanes_move_each_ti_once_and_keep_the_counters(eng, cfg, tmp_path, monkeypatch):
    """Batches of 4 on two lanes against the real database: resumes (an include_deferred pool and
    one without), error fires and final events of one run's tries, interleaved so that both lanes
    end tries of the same run at once. Every TI leaves `deferred` exactly once, as its fire says,
    nothing stays unreported, and the usage counters equal the recount."""
    from engine import triggerer as trig_mod

    monkeypatch.setattr(trig_mod, "REPORT_BATCH", 4)
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('kept', 40, :t), ('free', 40, :f)",
        t=True, f=False)
    (tmp_path / "dags").mkdir()
    sync_source(eng, tmp_path / "dags", """
    with DAG("d", max_active_tasks=None):
        for i in range(24):
            PythonTask(f"t{i:02d}", python_callable="x:y", pool="kept" if i % 2 else "free", retries=0)
""")
    trigger(eng, "d")
    tick(eng, cfg)
    tis = sorted(claim(eng), key=lambda ti: ti.task_id)
    assert len(tis) == 24
    for ti in tis:
        defer(eng, ti)
    ids = {r.task_id: r.trigger_id for r in sql(eng, "SELECT task_id, trigger_id FROM task_instance")}
    trig = Triggerer(eng, cfg)
    expect = {}
    for i, ti in enumerate(tis):  # by task: resume, error, final success, final failed, in turn
        kind = i % 4
        trig.fired.append(trig_mod.Fired(ids[ti.task_id], {"n": i} if kind != 1 else None,
                                         "boom" if kind == 1 else None,
                                         final={2: "success", 3: "failed"}.get(kind)))
        expect[ti.task_id] = (("queued" if i % 2 else "scheduled"), "failed", "success", "failed")[kind]

    assert asyncio.run(trig.report()) == 24
    assert trig.fired == [] and not trig.outage.down
    assert dict(sql(eng, "SELECT task_id, state FROM task_instance")) == expect
    assert sql(eng, f"SELECT count(*) FROM {quoted(eng, 'trigger')} WHERE fired_at IS NULL") == [(0,)]
    assert sql(eng, "SELECT * FROM usage_drift") == []
