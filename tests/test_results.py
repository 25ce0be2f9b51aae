"""Results (finish_ti_v3, task_results, `.output`), mapping over results (schedule_tis_v3),
final trigger events and batched firing (fire_triggers_v1, v2), on both dialects: at the procedure
level, and end to end with a real worker (the scenario of issue 13, a trigger finishing its task
with a result that a mapped downstream task expands over, is in tests/test_seed_scenarios.py)."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from engine import db
from engine.config import load_config
from engine.dag import DAG, PythonTask
from engine.errors import EngineError
from engine.taskvalues import MAX_RESULT_DEPTH, result_text
from engine.triggerer import Triggerer
from engine.worker import Worker
from tests.deferral import defer, quoted
from tests.helpers import claim, sql, sync_source, tick, ti_states, trigger

TASKS = '''
import asyncio
from engine import Defer
from engine.triggers import BaseTrigger, TriggerEvent


def extract():
    return {"rows": [1, 2, 3], "name": "é"}


def load(rows, table):
    return {"table": table, "total": sum(rows["rows"])}


def nothing():
    return None


def nan():
    return float("nan")


def unserialisable():
    return object()


def big():
    return "x" * 500


def surrogate():
    return "\\ud800"


def deep():
    v = []
    for _ in range(100_000):
        v = [v]
    return v


def show(x):
    return x


class Finish(BaseTrigger):
    def __init__(self, items, failed=False):
        self.items, self.failed = items, failed

    async def run(self):
        await asyncio.sleep(0)
        return TriggerEvent(self.items, final=True, failed=self.failed)


def wait(items):
    raise Defer(trigger=Finish(items), method="never")


def never(event):
    raise RuntimeError("a final event must not need a worker")


def double(x):
    return x * 2


def total(xs):
    return sum(xs)
'''


def results(eng, dag_id: str) -> dict:
    rows = sql(eng, "SELECT task_id, map_index, value FROM task_results WHERE dag_id = :d", d=dag_id)
    out = {}
    for r in rows:
        value = json.loads(r.value) if isinstance(r.value, str) else r.value
        out[r.task_id if r.map_index < 0 else f"{r.task_id}[{r.map_index}]"] = value
    return out


def reasons(eng, dag_id: str) -> dict:
    rows = sql(eng, "SELECT task_id, map_index, state_reason FROM task_instance WHERE dag_id = :d", d=dag_id)
    return {r.task_id if r.map_index < 0 else f"{r.task_id}[{r.map_index}]": r.state_reason for r in rows}


def finish_with(eng, ti, result, exit_code: int = 0, max_bytes=None):
    with db.connect(eng) as conn:
        return db.run(conn, "finish_ti_result", ti_id=ti.ti_id, try_number=ti.try_number, exit_code=exit_code,
                      timed_out=False, reason=None, now=None, result=result, max_bytes=max_bytes).scalar()


def fire_batch(eng, ids, events, errors, finals, max_bytes=None):
    with db.connect(eng) as conn:
        return [tuple(r) for r in db.run(conn, "fire_triggers", trigger_ids=ids, events=events, errors=errors,
                                         finals=finals, now=None, boost=1000, max_bytes=max_bytes)]


def settle(eng, cfg, dag_id: str, worker: Worker, triggerer: Triggerer | None = None, timeout: float = 60.0):
    """Scheduler passes, worker passes (real tries in subprocesses) and triggerer passes (one
    event loop, where its triggers run meanwhile) until the run has ended; fails after
    `timeout` s."""
    end = time.monotonic() + timeout
    aio = asyncio.new_event_loop()
    try:
        while sql(eng, "SELECT state FROM dag_run WHERE dag_id = :d", d=dag_id)[0][0] in ("queued", "running"):
            assert time.monotonic() < end, f"the run did not end: {ti_states(eng, dag_id)}"
            tick(eng, cfg)
            worker.run_once()
            if triggerer is not None:
                aio.run_until_complete(triggerer.run_once())
            aio.run_until_complete(asyncio.sleep(0.05))
    finally:
        worker.stop(timeout=5)
        if triggerer is not None:
            aio.run_until_complete(triggerer.stop())
        aio.close()


# ---- values ----------------------------------------------------------------------------------

@pytest.mark.parametrize("value, why", [
    (float("nan"), "nan"), ({"a": float("inf")}, "inf"), (object(), "plain JSON"), ("a\x00b", "NUL"),
    ("x" * 200, "more than max_result_bytes"), (2**70, "64 bits"), ("\ud800", "not valid UTF-8"),
    ({"\udcff": 1}, "not valid UTF-8"),
])
def test_result_text_refuses_what_cannot_be_stored(value, why):
    with pytest.raises(EngineError) as exc:
        result_text(value, 100)
    message = str(exc.value)
    assert why in message and "max_result_bytes" in message and "\n" not in message


def test_result_text_limits_nesting_and_measures_utf8():
    deep = []
    for _ in range(MAX_RESULT_DEPTH + 1):
        deep = [deep]
    with pytest.raises(EngineError, match="nests more than"):
        result_text(deep, 10**6)
    assert result_text({"é": [1, None, True]}, 100) == '{"\u00e9":[1,null,true]}'
    with pytest.raises(EngineError, match="more than max_result_bytes"):
        result_text("é" * 30, 59)  # 62 bytes of JSON, 32 characters


def test_output_references_add_the_upstream_and_are_checked():
    with DAG("d") as dag:
        a = PythonTask("a", python_callable="m:a")
        b = PythonTask("b", python_callable="m:b", op_kwargs={"rows": a.output, "n": 1})
        c = PythonTask("c", python_callable="m:c").expand(x=b.output)
    assert b.upstream_ids == {"a"} and c.upstream_ids == {"b"}
    assert b.op_kwargs == {"rows": {"__task_output__": "a"}, "n": 1}
    assert (c.map_upstream, c.inputs) == ("b", [{"name": "x", "upstream": "b", "mapped": 1}])
    with DAG("e"):
        other = PythonTask("o", python_callable="m:o")
    with DAG("f"):
        with pytest.raises(EngineError, match="another DAG"):
            PythonTask("x", python_callable="m:x", op_kwargs={"v": other.output})
        y = PythonTask("y", python_callable="m:y")
        with pytest.raises(EngineError, match="one upstream result"):
            PythonTask("z", python_callable="m:z").expand(a=y.output, b=[1])
        with pytest.raises(EngineError, match="own output"):
            s = PythonTask("s", python_callable="m:s")
            s.expand(x=s.output)
    assert dag.tasks["c"].expand_args == {"x": {"__task_output__": "b"}}


# ---- procedures ------------------------------------------------------------------------------

MAPPED = """
    with DAG("m", max_active_tasks=None):
        up = PythonTask("up", python_callable="x:y")
        each = PythonTask("each", python_callable="x:y", op_kwargs={"k": 1}).expand(x=up.output)
        after = PythonTask("after", python_callable="x:y", op_kwargs={"all": each.output})
"""


@pytest.mark.parametrize("result, expect", [
    ('[10, null, {"a": 1}]', "mapped"), ("[]", "empty"), ('{"a": 1}', "not a list"), (None, "none"),
])
def test_mapping_over_a_result_is_decided_when_the_upstream_succeeds(eng, cfg, tmp_path, result, expect):
    sync_source(eng, tmp_path / "dags", MAPPED)
    sql(eng, "UPDATE dag SET is_paused = false")
    trigger(eng, "m")
    tick(eng, cfg)
    assert ti_states(eng, "m") == {"up": "queued", "each": "none", "after": "none"}  # one TI until the result
    (up,) = claim(eng)
    assert finish_with(eng, up, result) == "success"
    tick(eng, cfg)
    st, why = ti_states(eng, "m"), reasons(eng, "m")
    if expect == "mapped":
        assert st == {"up": "success", "each[0]": "queued", "each[1]": "queued", "each[2]": "queued",
                      "after": "none"}
        tis = {ti.map_index: ti for ti in claim(eng)}
        with db.connect(eng) as conn:
            inputs = {i: [tuple(r) for r in db.run(conn, "task_inputs", ti_id=ti.ti_id)] for i, ti in tis.items()}
        assert inputs == {0: [("x", "up", True, True, 10)], 1: [("x", "up", True, True, None)],
                          2: [("x", "up", True, True, {"a": 1})]}
        for i, ti in tis.items():
            finish_with(eng, ti, json.dumps(i * 100) if i != 1 else None)  # each[1] leaves no result
        tick(eng, cfg)
        (after,) = claim(eng)
        with db.connect(eng) as conn:
            assert [tuple(r) for r in db.run(conn, "task_inputs", ti_id=after.ti_id)] == \
                [("all", "each", False, True, [0, 200])]
    elif expect == "empty":
        assert st == {"up": "success", "each": "skipped", "after": "skipped"}
        assert why["each"] == "mapped over an empty list (the result of up)"
    else:
        assert st == {"up": "success", "each": "failed", "after": "upstream_failed"}
        assert why["each"].startswith("cannot map over the result of up: ")
        assert ("it is a object, not a list" if expect == "not a list" else "it has none") in why["each"]
    assert sql(eng, "SELECT count(*) FROM limit_usage WHERE used > cap")[0][0] == 0


def test_results_are_stored_with_the_success_and_refused_values_fail_the_try(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", """
        with DAG("r", max_active_tasks=None):
            for name in ("ok", "nan", "big", "failed", "retry"):
                PythonTask(name, python_callable="x:y", retries=1 if name == "retry" else 0, retry_delay=0)
    """)
    sql(eng, "UPDATE dag SET is_paused = false")
    trigger(eng, "r")
    tick(eng, cfg)
    tis = {ti.task_id: ti for ti in claim(eng)}
    assert finish_with(eng, tis["ok"], '{"n": [1, 2.5, "s"]}', max_bytes=100) == "success"
    assert finish_with(eng, tis["nan"], '{"n": NaN}') == "failed"
    assert finish_with(eng, tis["big"], json.dumps("x" * 200), max_bytes=100) == "failed"
    assert finish_with(eng, tis["failed"], '{"ignored": 1}', exit_code=1) == "failed"
    assert finish_with(eng, tis["retry"], '{"first": 1}') == "success"
    assert results(eng, "r") == {"ok": {"n": [1, 2.5, "s"]}, "retry": {"first": 1}}
    why = reasons(eng, "r")
    assert why["nan"].startswith("the task's result is not plain JSON") and "\n" not in why["nan"]
    assert why["big"].startswith("the task's result is 202 bytes, more than max_result_bytes (100)")
    # A later try that does not succeed removes the result of the earlier one.
    sql(eng, "UPDATE task_instance SET state = 'running' WHERE id = :i", i=tis["retry"].ti_id)
    with db.connect(eng) as conn:
        db.run(conn, "finish_ti", ti_id=tis["retry"].ti_id, try_number=tis["retry"].try_number, exit_code=1,
               timed_out=False, reason=None, now=None)
    assert results(eng, "r") == {"ok": {"n": [1, 2.5, "s"]}}


def test_fire_triggers_batch_resumes_finishes_and_refuses_one_by_one(eng, cfg, tmp_path):
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('p', 10, true)")
    sync_source(eng, tmp_path / "dags", """
        with DAG("f", max_active_tasks=None):
            for name in ("resume", "done", "fail", "bad", "odd", "other"):
                PythonTask(name, python_callable="x:y", pool="p" if name != "other" else "default_pool")
    """)
    sql(eng, "UPDATE dag SET is_paused = false")
    trigger(eng, "f")
    tick(eng, cfg)
    tis = {ti.task_id: ti for ti in claim(eng)}
    for ti in tis.values():
        assert defer(eng, ti) == "deferred"
    rows = sql(eng, "SELECT task_id, trigger_id FROM task_instance WHERE dag_id = 'f'")
    trig = {r.task_id: r.trigger_id for r in rows}
    order = ["resume", "done", "fail", "bad", "odd", "other"]
    ids = [trig[n] for n in order]
    events = ['{"e": 1}', '[1, 2]', '"why"', '{"n": NaN}', "1", "{}"]
    finals = [None, "success", "failed", None, "maybe", None]
    states = fire_batch(eng, ids, events, [None] * 6, finals)
    assert states == [(trig["resume"], "queued"), (trig["done"], "success"), (trig["fail"], "failed"),
                      (trig["bad"], "failed"), (trig["odd"], "failed"), (trig["other"], "scheduled")]
    assert fire_batch(eng, ids, events, [None] * 6, finals) == [(i, None) for i in ids]  # each fires once
    assert results(eng, "f") == {"done": [1, 2]}
    why = reasons(eng, "f")
    assert why["fail"] == 'the trigger ended the try as failed: "why"'
    assert "not plain JSON" in why["bad"] and "unknown final state 'maybe'" in why["odd"]
    assert sql(eng, "SELECT count(*) FROM task_instance_history WHERE dag_id = 'f'")[0][0] == 4
    fired = sql(eng, f"SELECT count(*) FROM {quoted(eng, 'trigger')} WHERE fired_at IS NOT NULL")[0][0]
    assert fired == 6


# ---- end to end: real tries in subprocesses --------------------------------------------------

def _setup(eng, tmp_path, source: str, max_result_bytes: int = 65536):
    folder = tmp_path / "dags"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rtasks.py").write_text(TASKS)
    sync_source(eng, folder, source)
    sql(eng, "UPDATE dag SET is_paused = false")
    return load_config({"database_url": eng.url.render_as_string(hide_password=False),
                        "home": str(tmp_path / "home"), "max_result_bytes": max_result_bytes,
                        "heartbeat_interval": 0.2})


def test_return_values_flow_downstream_and_bad_ones_fail_the_try(eng, tmp_path):
    cfg = _setup(eng, tmp_path, """
        with DAG("e2e", max_active_tasks=None):
            extract = PythonTask("extract", python_callable="rtasks:extract")
            load = PythonTask("load", python_callable="rtasks:load", op_kwargs={"rows": extract.output, "table": "t"})
            nothing = PythonTask("nothing", python_callable="rtasks:nothing")
            needs = PythonTask("needs", python_callable="rtasks:show", op_kwargs={"x": nothing.output})
            for name in ("nan", "unserialisable", "big", "surrogate", "deep"):
                PythonTask(name, python_callable=f"rtasks:{name}")
    """, max_result_bytes=300)
    trigger(eng, "e2e")
    settle(eng, cfg, "e2e", Worker(eng, cfg, concurrency=4))
    st, why = ti_states(eng, "e2e"), reasons(eng, "e2e")
    assert st == {"extract": "success", "load": "success", "nothing": "success", "needs": "failed",
                  "nan": "failed", "unserialisable": "failed", "big": "failed", "surrogate": "failed",
                  "deep": "failed"}
    assert results(eng, "e2e") == {"extract": {"rows": [1, 2, 3], "name": "é"}, "load": {"table": "t", "total": 6}}
    assert why["needs"].startswith("could not read the task's inputs: input 'x' of task e2e.needs needs the result "
                                   "of upstream task 'nothing'")
    for name, part in (("nan", "nan"), ("unserialisable", "plain JSON"), ("big", "more than max_result_bytes (300)"),
                       ("surrogate", "not valid UTF-8"), ("deep", "nests more than 31 levels")):
        assert why[name].startswith("the result was refused: the return value of task e2e." + name), why[name]
        assert part in why[name] and "max_result_bytes" in why[name]


def test_a_try_whose_inputs_cannot_be_read_during_an_outage_waits_for_the_database(eng, tmp_path, monkeypatch):
    """The database goes away while a worker reads a claimed try's inputs: the try waits (it
    stays claimed and heartbeated) and starts once the database answers; no retry is used."""
    import sqlalchemy as sa

    from engine import worker as worker_mod

    cfg = _setup(eng, tmp_path, """
        with DAG("e2e", max_active_tasks=None):
            extract = PythonTask("extract", python_callable="rtasks:extract")
            load = PythonTask("load", python_callable="rtasks:load", op_kwargs={"rows": extract.output, "table": "t"})
    """)
    real, outage = worker_mod.resolve_inputs, {"left": 3}

    def unreachable(conn, row):
        if outage["left"]:
            outage["left"] -= 1
            raise sa.exc.OperationalError("SELECT", {}, Exception("server closed the connection unexpectedly"),
                                          connection_invalidated=True)
        return real(conn, row)
    monkeypatch.setattr(worker_mod, "resolve_inputs", unreachable)
    trigger(eng, "e2e")
    worker = Worker(eng, cfg, concurrency=4)
    worker.outage.first = worker.outage.cap = 0.05
    settle(eng, cfg, "e2e", worker)
    assert outage["left"] == 0
    assert ti_states(eng, "e2e") == {"extract": "success", "load": "success"}
    assert results(eng, "e2e")["load"] == {"table": "t", "total": 6}
    assert sql(eng, "SELECT try_number FROM task_instance WHERE task_id = 'load'")[0][0] == 1  # no retry used
