"""The six seed scenarios of issue 13, end to end on both dialects with a real Scheduler,
Worker (tries in subprocesses) and Triggerer: a deferred TI resumes without competing for a
slot again; a boosted resume; drain mode; a high-priority TI preempting; a wide TI served by a
reservation; a trigger finishing its task with a result a mapped downstream expands over.
Each waits on states (tests/helpers.until), and tasks wait on marker files the test writes,
never on time (tests/stack.py: the services and the tasks' module)."""
from __future__ import annotations

from engine.triggerer import Triggerer
from engine.worker import Worker
from tests.deferral import cli
from tests.helpers import sql, ti_states, trigger
from tests.stack import stack  # noqa: F401 - the fixture

def ti_row(eng, dag_id: str, task_id: str):
    return sql(eng, "SELECT * FROM task_instance WHERE dag_id = :d AND task_id = :t ORDER BY map_index",
               d=dag_id, t=task_id)[0]


def pool(eng, slots: int, include_deferred: bool = False) -> None:
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('p', :s, :i)", s=slots, i=include_deferred)


def one_try(eng, dag_id: str, task_id: str) -> None:
    """The TI ended in success in one try (the deferral and resume continued it)."""
    ti = ti_row(eng, dag_id, task_id)
    assert (ti.state, ti.try_number) == ("success", 1)
    hist = sql(eng, "SELECT try_number, state FROM task_instance_history WHERE ti_id = :i", i=ti.id)
    assert [tuple(h) for h in hist] == [(1, "success")]


DEFERRING = """
    with DAG("a", max_active_tasks=None):
        PythonTask("wait", python_callable="seedtasks:wait", op_kwargs={{"path": "{fire}"}}, pool="p",
                   priority_weight=1)
    with DAG("b", max_active_tasks=None):
        PythonTask("hog", python_callable="seedtasks:block", op_kwargs={{"path": "{free}"}}, pool="p",
                   priority_weight=5)
        PythonTask("next", python_callable="seedtasks:block", op_kwargs={{"path": "{free}"}}, pool="p",
                   priority_weight=5)
"""


def test_a_deferred_ti_resumes_without_competing_for_a_slot(eng, stack, tmp_path):
    """include_deferred pool of 1 slot: the deferred TI keeps it; higher-priority work waits
    ('pool full'); the trigger fires and the resume is queued at once, before them."""
    fire, free = tmp_path / "fire", tmp_path / "free"
    pool(eng, 1, include_deferred=True)
    s = stack(DEFERRING.format(fire=fire, free=free))
    trigger(eng, "a", "r1")
    s.until(lambda: ti_states(eng, "a") == {"wait": "deferred"}, "wait defers")
    trigger(eng, "b", "r1")
    s.until(lambda: ti_states(eng, "b") == {"hog": "scheduled", "next": "scheduled"}, "b's TIs are scheduled")
    s.step()
    assert dict(sql(eng, "SELECT task_id, reason FROM pending_reasons")) == {"hog": "pool full", "next": "pool full"}
    fire.write_text("go")
    free.write_text("go")
    s.until(lambda: ti_states(eng, "a") == {"wait": "success"}, "the resume succeeds")
    wait = ti_row(eng, "a", "wait")
    moves = [tuple(m) for m in sql(eng, "SELECT action, to_state FROM state_change WHERE ti_id = :i", i=wait.id)]
    assert moves == []  # no operator or preemption move: deferred -> queued by fire_trigger
    assert all(ti_row(eng, "b", t).start_date is None or ti_row(eng, "b", t).start_date >= wait.end_date
               for t in ("hog", "next"))
    s.until(lambda: set(ti_states(eng, "b").values()) == {"success"}, "b's TIs succeed")
    one_try(eng, "a", "wait")


def test_a_resume_is_boosted_past_waiting_work(eng, stack, tmp_path):
    """Pool of 1 slot without include_deferred: the deferred TI frees its slot (hog takes it);
    once the trigger fires, its resume (priority 1 + boost) takes the next freed slot before
    `next` (priority 5), which waited longer."""
    fire, free = tmp_path / "fire", tmp_path / "free"
    pool(eng, 1)
    s = stack(DEFERRING.format(fire=fire, free=free))
    trigger(eng, "a", "r1")
    s.until(lambda: ti_states(eng, "a") == {"wait": "deferred"}, "wait defers")
    trigger(eng, "b", "r1")
    s.until(lambda: sorted(ti_states(eng, "b").values()) == ["running", "scheduled"], "one of b's TIs runs")
    fire.write_text("go")
    s.until(lambda: ti_states(eng, "a") == {"wait": "scheduled"}, "the trigger fired: the resume waits")
    assert ti_row(eng, "a", "wait").priority_weight > 5  # boosted
    free.write_text("go")
    s.until(lambda: set(ti_states(eng, "b").values()) == {"success"} and ti_states(eng, "a") == {"wait": "success"},
            "everything succeeds")
    wait = ti_row(eng, "a", "wait")
    later = [ti_row(eng, "b", t) for t in ("hog", "next")]
    last = max(later, key=lambda t: t.start_date)
    assert wait.end_date <= last.start_date  # the resume ran before the waiting priority-5 TI
    one_try(eng, "a", "wait")


def test_drain_lets_deferred_work_finish_and_starts_nothing_new(eng, stack, tmp_path, db_url):
    fire = tmp_path / "fire"
    pool(eng, 4)
    s = stack("""
        with DAG("d", max_active_tasks=None):
            w = PythonTask("wait", python_callable="seedtasks:wait", op_kwargs={"path": "%s"}, pool="p")
            after = BashTask("after", bash_command="true", pool="p")
            w >> after
    """ % fire)
    trigger(eng, "d", "r1")
    s.until(lambda: ti_states(eng, "d").get("wait") == "deferred", "wait defers")
    assert cli(db_url, "dags", "drain", "d")[0] == 0
    trigger(eng, "d", "r2")
    fire.write_text("go")
    s.until(lambda: ti_states(eng, "d")["wait"] == "success", "the deferred TI finishes while draining")
    s.step()
    assert sql(eng, "SELECT run_id, state FROM dag_run ORDER BY id") == [("r1", "running"), ("r2", "queued")]
    assert dict(sql(eng, "SELECT task_id, reason FROM pending_reasons")) == {"after": "dag draining"}
    assert "drained: nothing in flight" in cli(db_url, "drain", "--status")[1]
    assert cli(db_url, "dags", "undrain", "d")[0] == 0
    s.until(lambda: [r.state for r in sql(eng, "SELECT state FROM dag_run ORDER BY id")] == ["success", "running"],
            "undrained: r1 ends, r2 starts")


PREEMPT = """
    with DAG("low", max_active_tasks=None):
        PythonTask("l", python_callable="seedtasks:block", op_kwargs={"path": "%(free)s"}, pool="gpu",
                   priority_weight=1, preemptible=True)
    with DAG("high", max_active_tasks=None):
        BashTask("h", pool="gpu", priority_weight=100, bash_command="echo high ran")
"""


def test_a_high_priority_ti_preempts_a_low_priority_try(eng, stack, tmp_path):
    """(The full check of the preemption path, with its process tree, is
    tests/test_priority.py::test_a_high_priority_ti_preempts_a_long_low_priority_try.)"""
    free = tmp_path / "free"
    sql(eng, "INSERT INTO pool (name, slots, include_deferred, preempt_margin) VALUES ('gpu', 1, :f, 10)", f=False)
    s = stack(PREEMPT % {"free": free}, preempt_min_runtime=0.0)
    trigger(eng, "low", "r1")
    s.until(lambda: ti_states(eng, "low") == {"l": "running"}, "low runs")
    trigger(eng, "high", "r1")
    s.until(lambda: ti_states(eng, "high") == {"h": "success"}, "high preempts and succeeds")
    free.write_text("go")
    s.until(lambda: ti_states(eng, "low") == {"l": "success"}, "low runs again and succeeds")
    low = ti_row(eng, "low", "l")
    assert (low.try_number, low.max_tries) == (2, 1)  # the preemption used no retry
    hist = sql(eng, "SELECT try_number, state FROM task_instance_history WHERE ti_id = :i ORDER BY try_number",
               i=low.id)
    assert [tuple(h) for h in hist] == [(1, "preempted"), (2, "success")]
    assert sql(eng, "SELECT count(*) FROM pool_reservation")[0][0] == 0


WIDE = """
    with DAG("w", max_active_tasks=None):
        PythonTask("narrow", python_callable="seedtasks:block", op_kwargs={"path": "%(free)s"}, pool="p",
                   priority_weight=5).expand(i=list(range(6)))
        PythonTask("wide", python_callable="seedtasks:block", op_kwargs={"path": "%(free)s"}, pool="p",
                   pool_slots=2, priority_weight=4)
"""


def test_a_wide_ti_is_served_by_a_reservation(eng, stack, tmp_path):
    """A 2-slot TI behind a stream of 1-slot TIs of higher priority (greedy serves it last):
    once it has waited reserve_after, the pool keeps freed slots for it, so it runs before the
    narrow TIs still waiting."""
    free = tmp_path / "free"
    pool(eng, 2)
    s = stack(WIDE % {"free": free}, reserve_after=0.5)
    trigger(eng, "w", "r1")
    s.until(lambda: sql(eng, "SELECT count(*) FROM pool_reservation WHERE reason = 'wide'")[0][0] == 1,
            "the wide TI gets a reservation")
    assert sorted(ti_states(eng, "w").values()).count("running") == 2  # two narrow TIs hold the pool
    free.write_text("go")
    s.until(lambda: set(ti_states(eng, "w").values()) == {"success"}, "everything succeeds")
    wide = ti_row(eng, "w", "wide")
    narrow = sql(eng, "SELECT start_date FROM task_instance WHERE task_id = 'narrow' ORDER BY start_date")
    assert sum(1 for n in narrow if n.start_date < wide.start_date) == 2  # only the two already running
    assert sql(eng, "SELECT count(*) FROM pool_reservation")[0][0] == 0


def test_a_trigger_finishes_its_task_and_a_mapped_downstream_expands_over_its_result(eng, tmp_path):
    from tests.test_results import _setup, results, settle
    cfg = _setup(eng, tmp_path, """
        with DAG("scenario", max_active_tasks=None):
            wait = PythonTask("wait", python_callable="rtasks:wait", op_kwargs={"items": [1, 2, 3, 4]})
            double = PythonTask("double", python_callable="rtasks:double").expand(x=wait.output)
            total = PythonTask("total", python_callable="rtasks:total", op_kwargs={"xs": double.output})
    """)
    trigger(eng, "scenario")
    settle(eng, cfg, "scenario", Worker(eng, cfg, concurrency=4), Triggerer(eng, cfg))
    assert ti_states(eng, "scenario") == {"wait": "success", "double[0]": "success", "double[1]": "success",
                                          "double[2]": "success", "double[3]": "success", "total": "success"}
    assert results(eng, "scenario") == {"wait": [1, 2, 3, 4], "double[0]": 2, "double[1]": 4, "double[2]": 6,
                                        "double[3]": 8, "total": 20}
    # The trigger ended the try: one try, one history row, no resume on a worker.
    row = sql(eng, "SELECT try_number, next_method FROM task_instance WHERE task_id = 'wait'")[0]
    assert (row.try_number, row.next_method) == (1, None)
    hist = sql(eng, "SELECT state FROM task_instance_history WHERE task_id = 'wait'")
    assert [h.state for h in hist] == ["success"]
    assert sql(eng, "SELECT state FROM dag_run WHERE dag_id = 'scenario'")[0][0] == "success"
