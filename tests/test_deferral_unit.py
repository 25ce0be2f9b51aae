"""Deferral without a database: the runner's exit 100 and resume call, the worker reporting a
Defer through defer_ti (against a fake of the named queries), trigger serialization and runs."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from engine import DateTimeTrigger, Defer, TimeDeltaTrigger, db
from engine.triggers import BaseTrigger, first_event, load_trigger
from engine.worker import Worker

TASKS = '''
from engine import Defer, FileTrigger, TimeDeltaTrigger


def start(out, x):
    raise Defer(trigger=TimeDeltaTrigger(seconds=30), method="resume", kwargs={"out": out, "x": x + 1}, timeout=3600)


def resume(event, out, x):
    with open(out, "w") as f:
        f.write(f"{x} {event}")


def bad_defer():
    raise Defer(trigger=FileTrigger("/x"), method="resume", kwargs={"conn": object()})
'''


@pytest.fixture
def dag_dir(tmp_path):
    d = tmp_path / "dags"
    d.mkdir()
    (d / "tasks.py").write_text(TASKS)
    (d / "other.py").write_text("def finish(event, **kw):\n    print('other', event, kw)\n")
    return d


def run_runner(spec, cwd):
    return subprocess.run([sys.executable, "-m", "engine.runner"], input=json.dumps(spec), cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_runner_hands_a_defer_to_the_worker_with_exit_100(tmp_path, dag_dir):
    defer_file = tmp_path / "defer.json"
    r = run_runner({"callable": "tasks:start", "kwargs": {"out": "o", "x": 1}, "dag_folder": str(dag_dir),
                    "defer_file": str(defer_file)}, tmp_path)
    assert r.returncode == 100, r.stderr
    assert json.loads(defer_file.read_text()) == {
        "classpath": "engine.triggers:TimeDeltaTrigger", "trigger_kwargs": {"seconds": 30.0}, "method": "resume",
        "kwargs": {"out": "o", "x": 2}, "timeout": 3600.0}
    # A Defer that cannot be serialized fails the try, with one line saying why in the log and
    # in the file, for the worker to report as the try's reason.
    r = run_runner({"callable": "tasks:bad_defer", "dag_folder": str(dag_dir), "defer_file": str(defer_file)},
                   tmp_path)
    reason = "the task's Defer was refused: Defer kwargs must be plain JSON (Object of type object is not JSON"
    assert r.returncode == 1 and r.stderr.startswith(reason) and len(r.stderr.splitlines()) == 1, r.stderr
    assert json.loads(defer_file.read_text())["error"].startswith(reason)


def test_runner_resume_calls_the_method_with_event_and_kwargs(tmp_path, dag_dir):
    out = tmp_path / "out.txt"
    r = run_runner({"callable": "tasks:start", "kwargs": {"out": "ignored", "x": 0}, "dag_folder": str(dag_dir),
                    "resume": {"method": "resume", "kwargs": {"out": str(out), "x": 5}, "event": {"k": 1}}}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "5 {'k': 1}" and "Resuming in resume" in r.stdout
    r = run_runner({"callable": "tasks:start", "dag_folder": str(dag_dir),
                    "resume": {"method": "other:finish", "kwargs": {"a": 1}, "event": None}}, tmp_path)
    assert r.returncode == 0 and "other None {'a': 1}" in r.stdout


class FakeDB:
    def __init__(self):
        self.queue, self.calls = [], []

    @contextmanager
    def connect(self, eng, **kw):
        yield None

    def run(self, conn, name, **p):
        if name == "claim_tis":
            rows, self.queue = self.queue[:p["limit"]], self.queue[p["limit"]:]
            return [SimpleNamespace(_mapping=r) for r in rows]
        self.calls.append((name, p))
        if name == "worker_heartbeat":
            return SimpleNamespace(all=lambda: [SimpleNamespace(ti_id=None, try_number=None, state="alive", reason=None)])
        value = {"register_job": 7, "heartbeat": True, "defer_ti": "deferred", "finish_ti": "success"}.get(name)
        return SimpleNamespace(scalar_one=lambda: value)


def python_row(tmp_path, dag_dir, **kw):
    row = {"ti_id": 1, "dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "try_number": 1,
           "kind": "python", "bash_command": None, "env": None, "python_callable": "tasks:start",
           "op_kwargs": {"out": str(tmp_path / "out.txt"), "x": 1}, "map_args": None, "execution_timeout": None,
           "fileloc": str(dag_dir / "pipeline.py"), "log_path": str(tmp_path / "logs" / "attempt=1.log"),
           "conf": {}}
    row.update(kw)
    return row


def drive(w, fake, name, limit=30.0):
    end = time.monotonic() + limit
    while not any(c[0] == name for c in fake.calls):
        assert time.monotonic() < end, fake.calls
        w.run_once()
        time.sleep(0.02)
    return [p for n, p in fake.calls if n == name]


def test_worker_reports_a_defer_and_runs_a_resume(monkeypatch, tmp_path, dag_dir):
    fake = FakeDB()
    monkeypatch.setattr(db, "connect", fake.connect)
    monkeypatch.setattr(db, "run", fake.run)
    cfg = SimpleNamespace(worker_queues="default", worker_concurrency=2, worker_poll_interval=0.01,
                          heartbeat_interval=0.0, job_heartbeat_threshold=60.0, worker_shutdown_timeout=5.0,
                          log_path=tmp_path / "logs", dags_path=dag_dir)
    w = Worker(eng=None, cfg=cfg)
    w.start()
    fake.queue = [python_row(tmp_path, dag_dir)]
    (d,) = drive(w, fake, "defer_ti")
    assert (d["ti_id"], d["try_number"], d["classpath"], d["method"], d["timeout"]) == \
        (1, 1, "engine.triggers:TimeDeltaTrigger", "resume", 3600.0)
    assert json.loads(d["trigger_kwargs"]) == {"seconds": 30.0}
    assert json.loads(d["next_kwargs"]) == {"out": str(tmp_path / "out.txt"), "x": 2}
    assert not any(n == "finish_ti" for n, _ in fake.calls)
    fake.queue = [python_row(tmp_path, dag_dir, next_method="resume", next_kwargs={"out": str(tmp_path / "r.txt"),
                                                                                   "x": 9}, event={"moment": "m"})]
    (f,) = drive(w, fake, "finish_ti")
    assert f["exit_code"] == 0 and (tmp_path / "r.txt").read_text() == "9 {'moment': 'm'}"
    log = (tmp_path / "logs" / "attempt=1.log").read_text()
    assert "Deferred:" in log and "resuming try 1" in log


class Pair(BaseTrigger):
    def __init__(self, a, b=2, **extra):
        self.a, self.b, self.extra = a, b, extra

    async def run(self):
        yield {"a": self.a}
        yield {"never": True}


def test_trigger_serialization_and_first_event():
    assert Pair(1, c=3).serialize() == (f"{__name__}:Pair", {"a": 1, "c": 3})
    assert load_trigger(f"{__name__}:Pair", {"a": 1, "c": 3}).extra == {"c": 3}
    assert asyncio.run(first_event(Pair(5))) == {"a": 5}
    moment = datetime(2030, 1, 2, 3, 4, 5)
    assert DateTimeTrigger(moment).serialize()[1] == {"moment": "2030-01-02T03:04:05+00:00"}
    t = TimeDeltaTrigger(timedelta(minutes=1))
    t.created_at = datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert t.serialize()[1] == {"seconds": 60.0} and t.fire_at() == datetime(2030, 1, 1, 0, 1, tzinfo=timezone.utc)
    past = DateTimeTrigger(datetime.now(timezone.utc) - timedelta(seconds=1))
    assert asyncio.run(first_event(past))["moment"] == past.moment.isoformat()
    with pytest.raises(ValueError, match="module.path:Class"):
        load_trigger("no_colon", {})
    assert Defer(TimeDeltaTrigger(1), timeout=timedelta(hours=1)).to_json()["timeout"] == 3600.0


# ---- the triggerer's report: batches on two lanes (engine/triggerer.py, REPORT_LANES) ------------
def _lanes_triggerer(monkeypatch, fire):
    """A Triggerer whose fire_triggers call is `fire(batch ids) -> states`, called from the
    lanes' threads; returns it and the list of (ids) batches it was handed."""
    from engine import triggerer as trig

    t = trig.Triggerer(None, SimpleNamespace(triggerer_capacity=10, heartbeat_interval=5, job_heartbeat_threshold=60,
                                             resume_priority_boost=0))
    calls = []
    monkeypatch.setattr(trig, "REPORT_BATCH", 3)
    monkeypatch.setattr(t, "_fire", lambda batch, now=None: (calls.append([f.trigger_id for f in batch]),
                                                             fire([f.trigger_id for f in batch]))[1])
    t.fired = [trig.Fired(i, {"n": i}, None) for i in range(1, 9)]
    return t, calls


def _db_error(code):
    import pymysql
    import sqlalchemy as sa

    return sa.exc.OperationalError("CALL fire_triggers_v1", {}, pymysql.err.OperationalError(code, "x"))


def test_report_sends_two_batches_at_once_and_loses_nothing(monkeypatch):
    import threading

    both = threading.Barrier(2, timeout=30)  # the first two calls meet: they are in flight together

    def fire(ids):
        if ids[0] in (1, 4):
            both.wait()
        return ["queued"] * len(ids)

    t, calls = _lanes_triggerer(monkeypatch, fire)
    assert asyncio.run(t.report()) == 8
    assert t.fired == [] and sorted(map(tuple, calls)) == [(1, 2, 3), (4, 5, 6), (7, 8)]
    assert not t.outage.down


def test_report_refused_batch_beside_a_reported_one_finds_the_refused_fire(monkeypatch):
    """Lane 1 refused (trigger 5 is poison), lane 0 reported: the refused batch goes one fire at
    a time on one lane, trigger 5 becomes an error fire, every other one is reported once."""
    reported = []

    def fire(ids):
        if 5 in ids and not t.fired[0].error:
            raise ValueError("poison")
        reported.extend(ids)
        return ["queued"] * len(ids)

    t, calls = _lanes_triggerer(monkeypatch, fire)
    assert asyncio.run(t.report()) == 8
    assert t.fired == [] and sorted(reported) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert calls[2:] == [[4], [5], [5], [6], [7], [8]]  # one at a time after the refusal; 5 again as an error


def test_report_deadlock_on_one_lane_retries_on_one_lane_without_an_outage(monkeypatch):
    failed = []

    def fire(ids):
        if 4 in ids and not failed:
            failed.append(ids)
            raise _db_error(1213)  # a deadlock: try again
        return ["queued"] * len(ids)

    t, calls = _lanes_triggerer(monkeypatch, fire)
    assert asyncio.run(t.report()) == 8
    assert t.fired == [] and not t.outage.down
    assert calls[2:] == [[4, 5, 6], [7, 8]]  # after the deadlock: one lane, in order


def test_report_database_down_keeps_every_fire(monkeypatch):
    t, calls = _lanes_triggerer(monkeypatch, lambda ids: (_ for _ in ()).throw(_db_error(2003)))
    before = list(t.fired)
    assert asyncio.run(t.report()) == 0
    assert t.fired == before and t.outage.down and len(calls) == 2
