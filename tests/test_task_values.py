"""Task code's values never kill a worker or a triggerer (both dialects): a bad Defer (NaN
kwarg, NUL in an EventTrigger key, timeout=1e300, a kwarg that is not JSON) fails that try
with the reason while a bystander succeeds on the same worker; a report the database refuses
fails that try instead of the worker; a trigger whose event is not plain JSON, whose error
holds a NUL or that raises SystemExit fails its try while the others fire; a fire the
database refuses is reported again as an error fire."""
from __future__ import annotations

import asyncio
import json
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pymysql
import psycopg
import pytest
import sqlalchemy as sa

from engine import db, triggerer as triggerer_mod
from engine.errors import EngineError
from engine.taskvalues import check_defer
from engine.triggerer import Triggerer
from engine.worker import Outcome, Worker
from tests.deferral import defer, states
from tests.helpers import claim, sql, sync_source, tick, trigger

BAD_TASKS = '''
import time
from engine import Defer, EventTrigger, TimeDeltaTrigger


def nan_kwarg():
    raise Defer(trigger=TimeDeltaTrigger(60), kwargs={"x": float("nan")})


def nul_key():
    raise Defer(trigger=EventTrigger("a\\x00b"))


def huge_timeout():
    raise Defer(trigger=TimeDeltaTrigger(60), timeout=1e300)


def object_kwarg():
    raise Defer(trigger=TimeDeltaTrigger(60), kwargs={"conn": object()})


def bystander():
    time.sleep(1)
    return "fine"
'''

BAD_DAG = """
    with DAG("bad", max_active_tasks=None):
        for name in ("nan_kwarg", "nul_key", "huge_timeout", "object_kwarg", "bystander"):
            PythonTask(name, python_callable=f"badtasks:{name}")
"""

REASONS = {
    "nan_kwarg": "the task's Defer was refused: Defer kwargs['x'] is nan (not JSON)",
    "nul_key": "the task's Defer was refused: EventTrigger: bad event key 'a\\x00b'",
    "huge_timeout": "the task's Defer was refused: Defer timeout must be from 0 to 3,153,600,000 seconds, got 1e+300",
    "object_kwarg": "the task's Defer was refused: Defer kwargs must be plain JSON",
}


def settle(step, done, timeout: float = 90.0) -> None:
    end = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < end, "did not settle in time"
        step()
        time.sleep(0.05)


def test_bad_defers_fail_their_try_and_the_worker_goes_on(eng, cfg, tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "badtasks.py").write_text(BAD_TASKS)
    sync_source(eng, dags, BAD_DAG)
    trigger(eng, "bad")
    tick(eng, cfg)
    w = Worker(eng, cfg, concurrency=5)
    w.start()
    job_id = w.job.id
    try:
        w.run_once()
        assert len(w.children) == 5  # all five run at once on this worker
        settle(w.run_once, lambda: not w.children and not w.unreported)
        assert w.job.id == job_id and sql(eng, "SELECT state FROM job WHERE id = :j", j=job_id) == [("running",)]
    finally:
        w.stop(timeout=0)
    rows = {r.task_id: r for r in sql(eng, "SELECT task_id, state, state_reason FROM task_instance "
                                           "WHERE dag_id = 'bad'")}
    assert rows["bystander"].state == "success"
    for task_id, reason in REASONS.items():
        assert rows[task_id].state == "failed", rows[task_id]
        assert reason in rows[task_id].state_reason, rows[task_id].state_reason
    hist = dict(sql(eng, "SELECT task_id, reason FROM task_instance_history WHERE dag_id = 'bad'"))
    assert all(REASONS[t] in hist[t] for t in REASONS) and hist["bystander"] is None
    assert w.job.id == job_id and sql(eng, "SELECT state FROM job WHERE id = :j", j=job_id) == [("success",)]
    log = Path(sql(eng, "SELECT log_path FROM task_instance WHERE task_id = 'nan_kwarg'")[0][0]).read_text()
    assert REASONS["nan_kwarg"] in log  # the runner's one line, in the task log


ONE = """
    with DAG("one", max_active_tasks=None):
        for name in ("a", "b"):
            PythonTask(name, python_callable="x:y")
"""


def claimed(eng, cfg, tmp_path, source=ONE, dag_id="one") -> dict:
    sync_source(eng, tmp_path / "dags", source)
    trigger(eng, dag_id)
    tick(eng, cfg)
    return {ti.task_id: ti for ti in claim(eng)}


def test_a_refused_report_fails_that_try_not_the_worker(eng, cfg, tmp_path, caplog):
    """A Defer that got past every check but that the database refuses (here: NaN, which the
    runner and the worker would have refused) fails that try with the database's message."""
    tis = claimed(eng, cfg, tmp_path)
    w = Worker(eng, cfg)
    w.start()
    bad = {"classpath": "engine.triggers:TimeDeltaTrigger", "trigger_kwargs": {"seconds": 1}, "method": "resume",
           "kwargs": {"x": float("nan")}, "timeout": None}
    w.unreported = [Outcome(tis["a"].ti_id, tis["a"].try_number, 100, defer=bad),
                    Outcome(tis["b"].ti_id, tis["b"].try_number, 0)]
    w._report_pending()
    assert not w.unreported
    rows = dict(sql(eng, "SELECT task_id, state FROM task_instance WHERE dag_id = 'one'"))
    assert rows == {"a": "failed", "b": "success"}
    (reason,) = sql(eng, "SELECT reason FROM task_instance_history WHERE ti_id = :i", i=tis["a"].ti_id)[0]
    assert reason.startswith("the database refused the report: ") and "\n" not in reason and len(reason) <= 1000
    assert sum("refused the report" in r.getMessage() for r in caplog.records) == 1
    assert not w.outage.down and w._heartbeat()  # the database was never "down"
    w.stop(timeout=0)


class Refuses:
    """db.run stand-in: refuses defer_ti, and finish_ti with a reason; records the rest."""

    def __init__(self, refuse_finish_without_reason=False):
        self.calls, self.refuse_all = [], refuse_finish_without_reason

    @contextmanager
    def connect(self, eng, **kw):
        yield None

    def run(self, conn, name, **p):
        self.calls.append((name, p))
        if name == "defer_ti" or (name == "finish_ti" and (p["reason"] is not None or self.refuse_all)):
            raise sa.exc.DataError("SELECT ...", {}, psycopg.errors.InvalidParameterValue("refused \x00 value"))
        return SimpleNamespace(scalar_one=lambda: {"register_job": 3, "finish_ti": "failed"}.get(name, True))


def started_on(fake, monkeypatch, tmp_path) -> Worker:
    """A started Worker whose database is the stand-in `fake` (its connect and run)."""
    monkeypatch.setattr(db, "connect", fake.connect)
    monkeypatch.setattr(db, "run", fake.run)
    cfg = SimpleNamespace(worker_queues="default", worker_concurrency=1, worker_poll_interval=0.01,
                          heartbeat_interval=0.0, job_heartbeat_threshold=60.0, worker_shutdown_timeout=1.0,
                          log_path=tmp_path)
    w = Worker(None, cfg)
    w.start()
    return w


@pytest.mark.parametrize("refuse_all", [False, True])
def test_refused_twice_then_no_reason_then_given_up(monkeypatch, tmp_path, refuse_all):
    fake = Refuses(refuse_all)
    w = started_on(fake, monkeypatch, tmp_path)
    w.unreported = [Outcome(5, 1, 100, defer={"classpath": "m:C", "method": "r", "kwargs": {}, "timeout": None})]
    w._report_pending()
    assert not w.unreported  # never retried forever
    reports = [(n, p.get("exit_code"), p.get("reason")) for n, p in fake.calls
               if n not in ("register_job", "set_job_queues")]
    assert reports[0][0] == "defer_ti"
    assert reports[1] == ("finish_ti", 1, "the database refused the report: refused value")
    assert reports[2] == ("finish_ti", 1, None)
    assert len(reports) == 3


class DropsDefers(Refuses):
    """db.run stand-in: defer_ti loses the connection (what MariaDB does with a statement larger
    than max_allowed_packet) while every other statement is answered."""

    def run(self, conn, name, **p):
        self.calls.append((name, p))
        if name == "defer_ti":
            raise sa.exc.OperationalError("CALL ...", {}, pymysql.err.OperationalError(2013, "Lost connection"))
        return SimpleNamespace(scalar_one=lambda: {"register_job": 3, "finish_ti": "failed",
                                                   "db_now": "now"}.get(name, True))


def test_a_report_that_loses_the_connection_while_the_database_answers_is_refused_at_the_third(monkeypatch, tmp_path):
    """One try's report that always drops the connection must not hold back the reports behind
    it forever (they were lost when the worker's job was declared dead): it is tried again at
    the next passes, then refused (the try fails with the reason) and the others go."""
    fake = DropsDefers()
    w = started_on(fake, monkeypatch, tmp_path)
    w.unreported = [Outcome(5, 1, 100, defer={"classpath": "m:C", "method": "r", "kwargs": {}, "timeout": None}),
                    Outcome(6, 1, 100, defer={"classpath": "m:C", "method": "r", "kwargs": {}, "timeout": None}),
                    Outcome(7, 1, 0)]
    for _ in range(2):
        w._report_pending()
        assert [o.ti_id for o in w.unreported] == [5, 6, 7] and not w.outage.down
    w._report_pending()  # the third loss of ti 5's report: refused; ti 6's is then lost once
    assert [(o.ti_id, o.dropped) for o in w.unreported] == [(6, 1), (7, 0)]
    failed = [p for n, p in fake.calls if n == "finish_ti" and p["ti_id"] == 5]
    assert len(failed) == 1 and failed[0]["exit_code"] == 1
    assert failed[0]["reason"].startswith("the database refused the report: it lost the connection 3 times")
    for _ in range(2):
        w._report_pending()
    assert not w.unreported  # ti 6 refused the same way, ti 7 reported
    assert [p["ti_id"] for n, p in fake.calls if n == "finish_ti"] == [5, 6, 7]


def test_a_defer_over_the_size_bound_is_refused_in_one_line():
    """A Defer's kwargs end in one statement: MariaDB drops the connection on one larger than
    max_allowed_packet, so the Defer is refused before, with its size (trigger kwargs count)."""
    d = {"classpath": "m:C", "method": "r", "kwargs": {"a": "x" * 3_000_000},
         "trigger_kwargs": {"b": "y" * 999_984}, "timeout": None}
    assert check_defer(d)["kwargs"] == d["kwargs"]  # 4,000,000 bytes of JSON: at the bound
    d["trigger_kwargs"]["b"] += "y"
    with pytest.raises(EngineError, match=r"^the Defer's kwargs and trigger kwargs are 4,000,001 bytes of JSON; "
                                          r"use at most 4,000,000"):
        check_defer(d)


def test_is_unreachable_tells_an_outage_from_a_refusal():
    def mysql(code):
        return sa.exc.OperationalError("x", {}, pymysql.err.OperationalError(code, "m"))

    def pg(cls):
        return sa.exc.OperationalError("x", {}, cls("m"))

    for exc in (EngineError("database x is unreachable"), mysql(2013), mysql(2006), mysql(2003), mysql(1053),
                pg(psycopg.errors.AdminShutdown), pg(psycopg.errors.ConnectionFailure), pg(psycopg.OperationalError),
                sa.exc.InterfaceError("x", {}, pymysql.err.InterfaceError(0, ""))):
        assert db.is_unreachable(exc), exc
    for exc in (mysql(1644), mysql(3140), mysql(1292),
                sa.exc.DataError("x", {}, psycopg.errors.InvalidParameterValue("m")),
                sa.exc.InternalError("x", {}, psycopg.errors.RaiseException("m")),
                sa.exc.ProgrammingError("x", {}, psycopg.errors.UndefinedFunction("m")),
                ValueError("NaN"), TypeError("x")):
        assert not db.is_unreachable(exc), exc
    assert db.is_transient(mysql(1213)) and db.is_transient(sa.exc.OperationalError(
        "x", {}, psycopg.errors.DeadlockDetected("m"))) and not db.is_transient(mysql(1644))


USER_TRIGGERS = '''
import asyncio
from engine.triggers import BaseTrigger


class NanEvent(BaseTrigger):
    async def run(self):
        await asyncio.sleep(0)
        yield {"x": float("nan")}


class NulError(BaseTrigger):
    async def run(self):
        raise ValueError("bad\\x00byte")


class Exits(BaseTrigger):
    async def run(self):
        raise SystemExit(3)


class Fine(BaseTrigger):
    async def run(self):
        await asyncio.sleep(0.2)
        return {"ok": 1}
'''

FOUR = """
    with DAG("trig", max_active_tasks=None):
        for name in ("nan", "nul", "exits", "fine"):
            PythonTask(name, python_callable="x:y", pool="p")
"""
CLASSES = {"nan": "NanEvent", "nul": "NulError", "exits": "Exits", "fine": "Fine"}


def four_deferred(eng, cfg, tmp_path) -> dict:
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('p', 10, true)")
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "usertriggers.py").write_text(USER_TRIGGERS)
    tis = claimed(eng, cfg, tmp_path, FOUR, "trig")
    for name, ti in tis.items():
        defer(eng, ti, f"usertriggers:{CLASSES[name]}", {})
    return tis


def run_triggerer(eng, cfg) -> Triggerer:
    trig = Triggerer(eng, cfg)

    async def main():
        end = time.monotonic() + 60
        while states(eng, "trig").get("deferred", 0):
            assert time.monotonic() < end, "the triggerer did not fire everything in time"
            await trig.run_once()
            await asyncio.sleep(0.05)
        await trig.stop()
    asyncio.run(main())
    return trig


def reasons(eng) -> dict:
    return dict(sql(eng, "SELECT task_id, state_reason FROM task_instance WHERE dag_id = 'trig' "
                         "AND state = 'failed'"))


def test_bad_trigger_values_fail_their_try_and_the_triggerer_goes_on(eng, cfg, tmp_path):
    four_deferred(eng, cfg, tmp_path)
    trig = run_triggerer(eng, cfg)
    assert states(eng, "trig") == {"failed": 3, "queued": 1}
    r = reasons(eng)
    assert "trigger failed: its event is not plain JSON: trigger event['x'] is nan" in r["nan"]
    assert "trigger failed: ValueError: bad byte" in r["nul"]
    assert "trigger failed: SystemExit: 3" in r["exits"]
    assert sql(eng, "SELECT state FROM job WHERE id = :j", j=trig.job.id) == [("success",)]


def test_a_refused_fire_is_reported_again_as_an_error_fire(eng, cfg, tmp_path, monkeypatch):
    """Without the event check, NaN reaches the database. fire_triggers fails that try itself
    (the event is not plain JSON); a database that refuses the whole batch instead (as one of
    an older release could) gets the fires one by one, and the refused one as an error. The
    refusal is forced here: a statement before the call raises when an event holds NaN."""
    monkeypatch.setattr(triggerer_mod, "check_event", lambda event: event)
    real = db._statements
    events = {"postgresql": "array_to_string(CAST(:events AS text[]), ',')", "mysql": ":events"}
    refuse = "SELECT CASE WHEN {} LIKE '%NaN%' THEN (SELECT 1 UNION SELECT 2) ELSE 1 END"
    monkeypatch.setattr(db, "_statements", lambda dialect, name, calls=():
                        (sa.text(refuse.format(events[dialect])), *real(dialect, name, calls))
                        if name == "fire_triggers" else real(dialect, name, calls))
    four_deferred(eng, cfg, tmp_path)
    run_triggerer(eng, cfg)
    assert states(eng, "trig") == {"failed": 3, "queued": 1}
    assert reasons(eng)["nan"].startswith("the database refused the trigger's fire: ")
    events = [json.loads(e) if isinstance(e, str) else e
              for (e,) in sql(eng, 'SELECT event FROM "trigger" WHERE event IS NOT NULL'.replace(
                  '"', '`' if eng.dialect.name != "postgresql" else '"'))]
    assert events == [{"ok": 1}]


def test_an_unchecked_nan_event_fails_only_its_try_in_the_database(eng, cfg, tmp_path, monkeypatch):
    """Without the triggerer's event check, fire_trigger_v2 itself fails the try whose event is
    not plain JSON; the other triggers fire as usual."""
    monkeypatch.setattr(triggerer_mod, "check_event", lambda event: event)
    four_deferred(eng, cfg, tmp_path)
    run_triggerer(eng, cfg)
    assert states(eng, "trig") == {"failed": 3, "queued": 1}
    assert "not plain JSON" in reasons(eng)["nan"]
