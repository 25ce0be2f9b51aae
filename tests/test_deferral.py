"""Deferral at the procedure level (both dialects): defer_ti_v1, fire_trigger_v1, the resume
claim, the failure path, drain and pause, and the dev-list scenario of issue 5."""
from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from engine import db
from tests.deferral import cli, defer, fire, over_cap, quoted, states, trigger_ids
from tests.helpers import (claim, finish, sql, start_in_thread, sync_source, tick, ti_states, trigger,
                           until_waiting_or_done)

ONE = """
    with DAG("d", max_active_tasks=None):
        a = PythonTask("a", python_callable="x:y", pool="p", retries={retries}, retry_delay=0)
        b = PythonTask("b", python_callable="x:y", pool="p")
        a >> b
"""


def setup_pool(eng, slots: int, include_deferred: bool) -> None:
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('p', :s, :i)", s=slots, i=include_deferred)
    sql(eng, "UPDATE executor SET parallelism = NULL")


@pytest.fixture
def one(eng, cfg, tmp_path):
    """DAG d: a >> b in pool p; returns a function that syncs it and claims `a` of a new run."""
    def make(include_deferred: bool, retries: int = 0, slots: int = 4):
        setup_pool(eng, slots, include_deferred)
        sync_source(eng, tmp_path / "dags", ONE.format(retries=retries))
        trigger(eng, "d")
        tick(eng, cfg)
        (ti,) = claim(eng)
        return ti
    return make


@pytest.mark.parametrize("include_deferred", [True, False])
def test_defer_and_resume_continue_the_same_try(eng, cfg, one, include_deferred):
    ti = one(include_deferred)
    assert defer(eng, ti, next_kwargs={"k": 1}, timeout=60) == "deferred"
    assert defer(eng, ti) is None  # a repeated report changes nothing, creates no trigger
    row = sql(eng, "SELECT state, trigger_id, next_method, try_number FROM task_instance WHERE id = :i", i=ti.ti_id)[0]
    assert (row.state, row.next_method, row.try_number) == ("deferred", "resume", 1)
    g = sql(eng, f"SELECT classpath, ti_id, triggerer_job_id, fired_at, timeout_at, created_at "
                 f"FROM {quoted(eng, 'trigger')} WHERE id = :t", t=row.trigger_id)[0]
    assert (g.classpath, g.ti_id, g.triggerer_job_id, g.fired_at) == ("engine.triggers:DateTimeTrigger", ti.ti_id,
                                                                       None, None)
    assert abs((g.timeout_at - g.created_at).total_seconds() - 60) < 0.01
    used = sql(eng, f"SELECT used FROM limit_usage WHERE kind = 'pool' AND {quoted(eng, 'key')} = 'p'")[0][0]
    assert used == (1 if include_deferred else 0)  # the slot is kept only with include_deferred

    assert fire(eng, row.trigger_id, {"moment": "now"}) == ("queued" if include_deferred else "scheduled")
    assert fire(eng, row.trigger_id, {"again": 1}) is None  # a trigger fires once
    if not include_deferred:
        assert sql(eng, "SELECT priority_weight FROM task_instance WHERE id = :i", i=ti.ti_id)[0][0] == 2 + 1000
        tick(eng, cfg)
    (again,) = claim(eng)
    assert (again.ti_id, again.try_number, again.next_method, again.next_kwargs, again.event) == \
        (ti.ti_id, 1, "resume", {"k": 1}, {"moment": "now"})
    assert sql(eng, "SELECT next_method FROM task_instance WHERE id = :i", i=ti.ti_id)[0][0] is None
    assert finish(eng, again, 0) == "success"
    hist = sql(eng, "SELECT try_number, state FROM task_instance_history WHERE ti_id = :i", i=ti.ti_id)
    assert [tuple(h) for h in hist] == [(1, "success")]  # one try, recorded once


@pytest.mark.parametrize("how", ["error", "timeout"])
def test_trigger_error_or_timeout_fails_the_try_and_retries(eng, cfg, one, how):
    ti = one(True, retries=1)
    now = sql(eng, "SELECT now()")[0][0]
    defer(eng, ti, timeout=5, now=now)
    (tid,) = trigger_ids(eng)

    def end(trigger_id, at):
        if how == "error":
            return fire(eng, trigger_id, error="trigger failed: ValueError: boom", now=at)
        with db.connect(eng) as conn:  # a triggerer's pass fails what timed out
            db.run(conn, "claim_triggers", job_id=None, limit=0, threshold=60, now=at).all()
        return sql(eng, "SELECT state FROM task_instance WHERE id = :i", i=ti.ti_id)[0][0]

    assert end(tid, now + timedelta(seconds=1 if how == "error" else 6)) == "up_for_retry"
    row = sql(eng, "SELECT state_reason, next_method, retry_at FROM task_instance WHERE id = :i", i=ti.ti_id)[0]
    assert row.next_method is None and ("boom" in row.state_reason if how == "error" else "timed out" in row.state_reason)
    assert over_cap(eng) == []
    # The retry is a new try that starts from the beginning (no resume).
    tick(eng, cfg, now=row.retry_at)
    (retry,) = claim(eng, now=row.retry_at)
    assert (retry.try_number, retry.next_method) == (2, None)
    defer(eng, retry, timeout=5, now=row.retry_at)
    assert end(trigger_ids(eng)[0], row.retry_at + timedelta(seconds=6)) == "failed"
    hist = sql(eng, "SELECT try_number, state FROM task_instance_history WHERE ti_id = :i ORDER BY try_number",
               i=ti.ti_id)
    assert [tuple(h) for h in hist] == [(1, "failed"), (2, "failed")]


def test_drain_admits_nothing_new_but_deferred_work_finishes(eng, cfg, one, db_url):
    ti = one(False)
    defer(eng, ti)
    assert cli(db_url, "dags", "drain", "d")[0] == 0
    trigger(eng, "d")  # a new manual run: queued, not started while draining
    tick(eng, cfg)
    assert sql(eng, "SELECT state FROM dag_run ORDER BY id") == [("running",), ("queued",)]
    code, out = cli(db_url, "drain", "--status")
    assert "dags d" in out and "1 TI(s) still in flight" in out
    # The trigger fires: the resume is queued even though the DAG drains.
    assert fire(eng, trigger_ids(eng)[0], {"ok": True}) == "scheduled"
    tick(eng, cfg)
    (resumed,) = claim(eng)
    finish(eng, resumed, 0)
    tick(eng, cfg)  # b becomes scheduled, but is not queued: no new TI starts
    assert ti_states(eng, "d") == {"a": "success", "b": "scheduled"}
    assert sql(eng, "SELECT reason FROM pending_reasons") == [("dag draining",)]
    assert "drained: nothing in flight" in cli(db_url, "drain", "--status")[1]
    # The deployment-wide drain says so too; undrain ends both.
    assert cli(db_url, "drain")[0] == 0
    assert sql(eng, "SELECT reason FROM pending_reasons") == [("deployment draining",)]
    assert "drain ended" in cli(db_url, "undrain")[1]
    assert "not draining" in cli(db_url, "drain", "--status")[1]
    summary = tick(eng, cfg)
    assert (summary["runs_started"], summary["tis_queued"]) == (1, 2)  # b, and a of the second run


@pytest.mark.parametrize("include_deferred", [True, False])
def test_paused_dag_deferred_tasks_still_finish(eng, cfg, one, include_deferred):
    ti = one(include_deferred)
    defer(eng, ti)
    sql(eng, "UPDATE dag SET is_paused = true")
    fire(eng, trigger_ids(eng)[0], None)
    tick(eng, cfg)
    (resumed,) = claim(eng)
    assert (resumed.ti_id, resumed.next_method) == (ti.ti_id, "resume")
    finish(eng, resumed, 0)
    tick(eng, cfg)
    assert ti_states(eng, "d") == {"a": "success", "b": "scheduled"}
    assert sql(eng, "SELECT reason FROM pending_reasons") == [("dag paused",)]


SCENARIO = """
    with DAG("low", max_active_tasks=None):
        PythonTask("wait", python_callable="x:y", pool="p", priority_weight=1).expand(i=list(range(100)))
    with DAG("high", max_active_tasks=None):
        PythonTask("work", python_callable="x:y", pool="p", priority_weight=5).expand(i=list(range(1000)))
"""


@pytest.mark.parametrize("include_deferred", [True, False], ids=["slot_kept", "boost"])
def test_dev_list_scenario_resumes_go_first(eng, cfg, tmp_path, include_deferred):
    """100 deferred TIs of a low-priority DAG, then 1,000 high-priority TIs in the same pool;
    the triggers fire: the 100 resume at once (slot kept) or take the next 100 slots (boost)."""
    slots = 110 if include_deferred else 10
    setup_pool(eng, slots, include_deferred)
    sync_source(eng, tmp_path / "dags", SCENARIO)
    trigger(eng, "low")
    while states(eng, "low").get("deferred", 0) < 100:
        tick(eng, cfg)
        for ti in claim(eng):
            defer(eng, ti)
    trigger(eng, "high")
    tick(eng, cfg)
    busy = claim(eng)
    assert len(busy) == 10 and {t.dag_id for t in busy} == {"high"}
    assert states(eng, "high") == {"running": 10, "scheduled": 990}

    for tid in trigger_ids(eng, "low"):
        assert fire(eng, tid, {"done": True}) == ("queued" if include_deferred else "scheduled")
        if tid % 25 == 0:
            assert over_cap(eng) == []
    if include_deferred:
        # Within one tick (here: at once): all 100 queued, and the tick queues no new work.
        assert states(eng, "low") == {"queued": 100}
        assert tick(eng, cfg)["tis_queued"] == 0
        assert over_cap(eng) == []
        resumed = claim(eng)
        assert len(resumed) == 100 and all(t.next_method == "resume" and t.try_number == 1 for t in resumed)
        return
    # Boost: every slot that frees goes to a resume until all 100 ran.
    for _ in range(10):
        for ti in busy:
            finish(eng, ti, 0)
        tick(eng, cfg)
        busy = claim(eng)
        assert len(busy) == 10 and {t.dag_id for t in busy} == {"low"}
        assert all(t.event == {"done": True} for t in busy)
        assert over_cap(eng) == []
    for ti in busy:
        finish(eng, ti, 0)
    tick(eng, cfg)
    assert {t.dag_id for t in claim(eng)} == {"high"}
    assert states(eng, "low") == {"success": 100}


RACE = """
    with DAG("d", max_active_tasks=None):
        PythonTask("a1", python_callable="x:y", pool="q", priority_weight=10)
        PythonTask("a2", python_callable="x:y", pool="p", priority_weight=10)
        PythonTask("b", python_callable="x:y", pool="p", priority_weight=10)
        PythonTask("c", python_callable="x:y", pool="p", priority_weight=1)
"""


@pytest.mark.parametrize("how, first", [("fire_trigger", "p"), ("send_event", "p"), ("send_event", "q")])
def test_a_resume_racing_a_change_of_its_pools_include_deferred_keeps_the_pools_limit(eng, cfg, tmp_path, how,
                                                                                     first):
    """Pool p (2 slots, include_deferred): a2 deferred (holding its slot), b running, c waiting.
    An operator's transaction turns include_deferred off (a2's slot is free) and, as a scheduler
    would then, queues c into it; while it is open, a2's trigger fires (alone, or by an event
    that also fires a1's trigger in pool q, before or after a2's). The change commits first, so
    the fire must see it: a2 waits for a slot (`scheduled`), and p never holds more than 2.
    Before revision 0048 the fire read the flag before its wait (PostgreSQL: the statement
    before the UPDATE that waits; MySQL/MariaDB: send_event_v1's one read view, made by the
    first trigger's reads) and queued a2 "keeping its slot": 3 TIs of p at once."""
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('p', 2, :t), ('q', 4, :f)", t=True, f=False)
    sql(eng, "UPDATE executor SET parallelism = NULL")
    sync_source(eng, tmp_path / "dags", RACE)
    trigger(eng, "d")
    tick(eng, cfg)
    tis = {t.task_id: t for t in claim(eng)}
    assert sorted(tis) == ["a1", "a2", "b"]
    for name in (["a2", "a1"] if first == "p" else ["a1", "a2"]):   # trigger ids in this order
        defer(eng, tis[name], "engine.triggers:EventTrigger", {"key": "k"})
    (a2_trigger,) = [t for t in trigger_ids(eng) if sql(eng, "SELECT task_id FROM task_instance WHERE "
                                                             "trigger_id = :t", t=t)[0][0] == "a2"]
    c_id = sql(eng, "SELECT id FROM task_instance WHERE task_id = 'c' AND state = 'scheduled'")[0][0]

    def resume(conn):
        if how == "fire_trigger":
            return db.run(conn, "fire_trigger", trigger_id=a2_trigger, event="{}", error=None, now=None,
                          boost=1000).scalar()
        return db.run(conn, "send_event", key="k", payload="{}", now=None, boost=1000).scalar()

    outcome = {}
    holder = eng.connect()
    tx = holder.begin()
    try:
        holder.execute(sa.text("UPDATE pool SET include_deferred = :f WHERE name = 'p'"), {"f": False})
        holder.execute(sa.text("UPDATE task_instance SET state = 'queued', queued_at = updated_at WHERE id = :i"),
                       {"i": c_id})
        thread = start_in_thread(eng, resume, outcome, "fire")
        waited = until_waiting_or_done(eng, thread, outcome, "fire_pid")
        tx.commit()
    finally:
        holder.close()
    thread.join(60)
    assert waited, outcome          # the fire waited for the change (else the race did not happen)
    assert not isinstance(outcome.get("fire"), Exception), outcome
    assert outcome["fire"] == ("scheduled" if how == "fire_trigger" else 2)
    assert ti_states(eng, "d") == {"a1": "scheduled" if how == "send_event" else "deferred", "a2": "scheduled",
                                   "b": "running", "c": "queued"}
    assert over_cap(eng) == []
    assert sql(eng, "SELECT * FROM usage_drift") == []
