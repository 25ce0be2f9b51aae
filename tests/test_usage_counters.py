"""The usage counters (revision 0020) equal a recount of task_instance after any sequence of
changes: TIs inserted, moved between every state, pool and pool_slots, deleted; pools gaining and
losing include_deferred, created and dropped; folds in between. Checked through the view
usage_drift (counters + pending deltas vs the recount), which must be empty after every step, and
against limit_usage (the recount queue_tis_v1..v5 use). Concurrency and kill -9: tests/race.py and
the chaos tests check usage_drift at their end."""
from __future__ import annotations

import itertools

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine import db
from tests.helpers import SESSION_ID, until_waiting_or_done
from tests.world import reset

STATES = ["none", "scheduled", "queued", "running", "preempting", "deferred", "success", "failed", "up_for_retry"]
POOLS = ["p1", "p2", "p3"]


def drift(c) -> list[tuple]:
    return [tuple(r) for r in c.execute(sa.text("SELECT * FROM usage_drift"))]


def fold(c) -> None:
    """The fold the named query's queue_tis runs (MySQL/MariaDB: fold_usage_v2; a fold rolled
    back, its Aria scratch table not, is a case of tests/test_queue_tis_model.py)."""
    c.execute(sa.text("SELECT 1 FROM scheduler_lock WHERE name = 'queue_tis' FOR UPDATE"))
    if c.dialect.name == "postgresql":
        c.execute(sa.text("SELECT fold_usage_v1()"))
    else:
        c.execute(sa.text("CALL fold_usage_v2(@n)"))


def setup(c) -> None:
    reset(c)
    c.execute(sa.text("INSERT INTO executor (name, parallelism) VALUES ('default', 10), ('other', NULL)"))
    c.execute(sa.text("INSERT INTO pool (name, slots, include_deferred) VALUES ('p1', 10, :t), ('p2', 5, :f), "
              "('default_pool', 128, :f)"),
              {"t": True, "f": False})
    c.execute(sa.text("INSERT INTO dag (dag_id, fileloc, max_active_tasks) VALUES ('d', 'x', 3), ('d.x', 'x', NULL)"))
    c.execute(sa.text("INSERT INTO task (dag_id, task_id, kind, pool, max_active_tis_per_dag, max_active_tis_per_dagrun) "
                      "VALUES ('d', 't', 'bash', 'default_pool', 2, 1), "
                      "('d', 'u', 'bash', 'default_pool', NULL, NULL), ('d.x', 't', 'bash', 'default_pool', NULL, NULL)"))
    c.execute(sa.text("INSERT INTO dag_run (id, dag_id, run_id, run_type, state, run_after, created_at) VALUES "
                      "(1, 'd', 'r1', 'manual', 'running', '2026-01-01', '2026-01-01'), "
                      "(2, 'd', 'r2', 'manual', 'running', '2026-01-01', '2026-01-01'), "
                      "(3, 'd.x', 'r1', 'manual', 'running', '2026-01-01', '2026-01-01')"))


RUNS = {1: ("d", "r1"), 2: ("d", "r2"), 3: ("d.x", "r1")}
MAP_INDEX = itertools.count()
ti_ref = st.integers(min_value=0, max_value=7)
step = st.one_of(
    st.tuples(st.just("insert"), st.sampled_from([1, 2, 3]), st.sampled_from(["t", "u"]), st.sampled_from(STATES),
              st.sampled_from(POOLS), st.integers(1, 3), st.sampled_from(["default", "other"])),
    st.tuples(st.just("state"), ti_ref, st.sampled_from(STATES)),
    st.tuples(st.just("states"), st.sampled_from(STATES), st.sampled_from(STATES)),  # many rows, one statement
    st.tuples(st.just("move"), ti_ref, st.sampled_from(POOLS), st.integers(1, 3), st.sampled_from(["default", "other"])),
    st.tuples(st.just("delete"), ti_ref),
    st.tuples(st.just("include_deferred"), st.sampled_from(POOLS), st.booleans()),
    st.tuples(st.just("drop_pool"), st.sampled_from(POOLS)),
    st.tuples(st.just("rename_pool"), st.sampled_from(POOLS), st.sampled_from(POOLS)),
    st.tuples(st.just("fold")),
    st.tuples(st.just("rollback"), st.sampled_from(STATES)),
    # The named query's call (MySQL's queue_tis_v27, calling v26 (v24's text), as v17, v18 and v19, appends its final UPDATE's usage itself, its
    # row trigger passing over those rows), and a row written queued while the variables that
    # tell the trigger so are left set for another moment or job (a killed call's): tracked.
    st.tuples(st.just("queue"), ti_ref, st.integers(1, 4)),
    st.tuples(st.just("stale_flag"), ti_ref, st.sampled_from(["other_moment", "other_job"])),
)


def apply(c, s, ids: list[int]) -> None:
    kind = s[0]
    pick = (lambda i: ids[i % len(ids)]) if ids else None
    if kind == "insert":
        _, run, task, state, pool, slots, executor = s
        dag_id, run_id = RUNS[run]
        c.execute(sa.text("INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, "
                          "priority_weight, pool, pool_slots, queue, executor, run_after) VALUES (:r, :d, :rid, :t, "
                          ":m, :s, 1, :p, :ps, 'default', :e, '2026-01-01')"),
                  {"r": run, "d": dag_id, "rid": run_id, "t": task, "m": next(MAP_INDEX), "s": state, "p": pool,
                   "ps": slots, "e": executor})
        ids.append(c.execute(sa.text("SELECT max(id) FROM task_instance")).scalar())
    elif kind == "state" and ids:
        c.execute(sa.text("UPDATE task_instance SET state = :s WHERE id = :i"), {"s": s[2], "i": pick(s[1])})
    elif kind == "states":
        c.execute(sa.text("UPDATE task_instance SET state = :b WHERE state = :a"), {"a": s[1], "b": s[2]})
    elif kind == "move" and ids:
        c.execute(sa.text("UPDATE task_instance SET pool = :p, pool_slots = :ps, executor = :e WHERE id = :i"),
                  {"p": s[2], "ps": s[3], "e": s[4], "i": pick(s[1])})
    elif kind == "delete" and ids:
        i = pick(s[1])
        c.execute(sa.text("DELETE FROM task_instance WHERE id = :i"), {"i": i})
        ids.remove(i)
    elif kind == "include_deferred":
        c.execute(sa.text("UPDATE pool SET include_deferred = :v WHERE name = :n"), {"v": s[2], "n": s[1]})
        c.execute(sa.text("INSERT INTO pool (name, slots, include_deferred) SELECT :n, 4, :v FROM executor "
                          "WHERE name = 'default' AND NOT EXISTS (SELECT 1 FROM pool WHERE name = :n)"),
                  {"n": s[1], "v": s[2]})
    elif kind == "drop_pool":
        c.execute(sa.text("DELETE FROM pool WHERE name = :n"), {"n": s[1]})
    elif kind == "rename_pool" and s[1] != s[2]:
        c.execute(sa.text("UPDATE pool SET name = :b WHERE name = :a AND NOT EXISTS "
                          "(SELECT 1 FROM (SELECT name FROM pool) x WHERE x.name = :b)"), {"a": s[1], "b": s[2]})
    elif kind == "fold":
        fold(c)
    elif kind == "queue" and ids:  # (a TI made scheduled first: random steps seldom leave one)
        c.execute(sa.text("UPDATE task_instance SET state = 'scheduled' WHERE id = :i"), {"i": pick(s[1])})
        db.run(c, "queue_tis", max_tis=s[2], job_id=None, now=None, aging_rate=0, aging_cap=0, reserve_after=0).all()
    elif kind == "stale_flag" and ids:
        mysql = c.dialect.name != "postgresql"
        if mysql:
            c.execute(sa.text("SET @engine_usage_queued_at = '2026-01-01 00:00:00.000001', @engine_usage_queued_by = 7"))
        c.execute(sa.text("UPDATE task_instance SET state = 'queued', queued_at = :t, queued_by_job_id = :j "
                          "WHERE id = :i"),
                  {"t": "2026-01-01 00:00:00.000002" if s[2] == "other_moment" else "2026-01-01 00:00:00.000001",
                   "j": 7 if s[2] == "other_moment" else 8, "i": pick(s[1])})
        if mysql:
            c.execute(sa.text("SET @engine_usage_queued_at = NULL, @engine_usage_queued_by = NULL"))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=1, max_size=25))
# (The pool trigger's cases, which random steps seldom reach: a deferred TI in a pool that gains
# include_deferred, loses it, is renamed, dropped, created with it.)
@example(steps=[("insert", 1, "t", "deferred", "p2", 2, "default"), ("include_deferred", "p2", True), ("fold",),
                ("include_deferred", "p2", False)])
@example(steps=[("insert", 3, "t", "deferred", "p1", 3, "other"), ("rename_pool", "p1", "p3"), ("fold",),
                ("drop_pool", "p3"), ("include_deferred", "p1", True), ("state", 0, "queued")])
@example(steps=[("insert", 1, "u", "none", "p1", 2, "default"), ("insert", 2, "u", "scheduled", "p1", 1, "other"),
                ("queue", 0, 4)])
def test_counters_equal_the_recount_after_any_changes(eng, steps):
    with eng.begin() as c:
        setup(c)
        fold(c)
    ids: list[int] = []
    for s in steps:
        if s[0] == "rollback":  # a change rolled back leaves no trace
            with eng.connect() as c:
                tx = c.begin()
                c.execute(sa.text("UPDATE task_instance SET state = :s"), {"s": s[1]})
                tx.rollback()
        else:
            with eng.begin() as c:
                apply(c, s, ids)
        with eng.connect() as c:
            assert drift(c) == [], f"after {s}"
    with eng.begin() as c:
        fold(c)
        assert drift(c) == []
        assert c.execute(sa.text("SELECT count(*) FROM usage_delta")).scalar() == 0
        # The counters equal limit_usage (queue_tis_v1..v5's recount) on every limited partition.
        lu = {(r.kind, r.dag_run_id, r.dag_id, r.task_id, r.pool, r.executor): r.used
              for r in c.execute(sa.text("SELECT * FROM limit_usage")) if r.used}
        counters = {("pool", None, None, None, r.pool, None): r.slots
                    for r in c.execute(sa.text("SELECT * FROM used_pool"))}
        counters |= {("executor", None, None, None, None, r.executor): r.n
                     for r in c.execute(sa.text("SELECT * FROM used_executor"))}
        for key, used in lu.items():
            if key[0] in ("pool", "executor"):
                assert counters.get(key) == used, key
        assert all(v != 0 for v in counters.values())  # a counter at 0 is deleted


def test_recount_repairs_counters_after_a_truncate_or_a_hand_edit(eng):
    with eng.begin() as c:
        setup(c)
        for i, state in enumerate(["running", "queued", "deferred", "success"]):
            c.execute(sa.text("INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, "
                              "priority_weight, pool, pool_slots, queue, executor, run_after) VALUES (1, 'd', 'r1', "
                              "'t', :m, :s, 1, 'p1', 2, 'default', 'default', '2026-01-01')"), {"m": i, "s": state})
        fold(c)
        assert drift(c) == []
        c.execute(sa.text("UPDATE used_pool SET slots = slots + 5"))   # a hand edit
        c.execute(sa.text("DELETE FROM used_run"))
    with eng.connect() as c:
        assert sorted((r.kind, r.counted, r.recounted) for r in c.execute(sa.text("SELECT * FROM usage_drift"))) == \
            [("pool", 11, 6), ("run", 0, 3)]
    with eng.begin() as c:
        n = db.run(c, "recount_usage").scalar_one()
        assert n == 2
        assert drift(c) == []
        fold(c)
        assert drift(c) == []
        assert c.execute(sa.text("SELECT slots FROM used_pool WHERE pool = 'p1'")).scalar() == 6


def test_db_check_reports_drift_and_repair_fixes_it(eng, db_url):
    from click.testing import CliRunner

    from cli.main import main as engine_cli
    with eng.begin() as c:
        setup(c)
        c.execute(sa.text("INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, "
                          "priority_weight, pool, pool_slots, queue, executor, run_after) VALUES (2, 'd', 'r2', "
                          "'u', 0, 'running', 1, 'p2', 1, 'default', 'default', '2026-01-01')"))
    run = lambda *args: CliRunner().invoke(engine_cli, ["--database-url", db_url, "db", "check", *args])  # noqa: E731
    ok = run()
    assert ok.exit_code == 0, ok.output
    assert "usage counters" in ok.output and "equal to a recount" in ok.output
    with eng.begin() as c:
        c.execute(sa.text("DELETE FROM usage_delta"))   # the insert's change lost: the counters drift
    bad = run()
    assert bad.exit_code == 1
    assert "5 partition(s) differ from a recount" in bad.output and "engine db check --repair" in bad.output
    fixed = run("--repair")
    assert fixed.exit_code == 0, fixed.output
    assert "5 correction(s) appended" in fixed.output
    assert run().exit_code == 0


@pytest.mark.parametrize("kind", ["run", "task", "task_run", "executor"])
def test_a_limit_changed_since_the_last_fold_is_never_a_wrong_decision(eng, kind):
    """queue_tis_v6 finds full partitions through the limit the fold stored beside each counter
    (a hint). A limit raised or lowered while no TI of the partition moves leaves the hint stale:
    the call must still queue exactly what the greedy rule queues."""
    from tests.reference import TI, World, greedy
    from tests.world import load_world, queue

    def world(limit: int) -> World:
        tis = [TI(i, "d", 1, "t", i, "running" if i <= 2 else "scheduled", 1, "default_pool", 1)
               for i in range(1, 7)]
        return World(pools={"default_pool": (128, False)},
                     parallelism={"default": limit if kind == "executor" else None},
                     dags={"d": (limit if kind == "run" else None, False)},
                     tasks={("d", "t"): (limit if kind == "task" else None, limit if kind == "task_run" else None)},
                     runs={1: ("d", "running", 0)}, tis=tis)

    set_limit = {"run": "UPDATE dag SET max_active_tasks = :n",
                 "task": "UPDATE task SET max_active_tis_per_dag = :n",
                 "task_run": "UPDATE task SET max_active_tis_per_dagrun = :n",
                 "executor": "UPDATE executor SET parallelism = :n"}[kind]
    # Full at 2 (two running): a call folds and stores 2 beside the counter; nothing queued.
    load_world(eng, world(2))
    assert queue(eng, 10) == []
    # Raised to 4 with no TI moving: the stored 2 says full; 2 more must be queued.
    with eng.begin() as c:
        c.execute(sa.text(set_limit), {"n": 4})
    assert sorted(queue(eng, 10)) == sorted(greedy(world(4), 10)) == [3, 4]
    # The two queued end and a call folds that (max_tis 0: nothing queued): 2 hold places, and
    # 4 is stored beside the counter. Lowered to 2 with no TI moving: the stored 4 says room;
    # the limit says full, and nothing may be queued.
    with eng.begin() as c:
        c.execute(sa.text("UPDATE task_instance SET state = 'success' WHERE id IN (3, 4)"))
    assert queue(eng, 0) == []
    with eng.begin() as c:
        c.execute(sa.text(set_limit), {"n": 2})
    assert queue(eng, 10) == []
    with eng.begin() as c:
        c.execute(sa.text(set_limit), {"n": 3})
    assert queue(eng, 10) == [5]


@pytest.mark.parametrize("pins", ["queue_tis=5", ""])
def test_a_scheduler_on_a_queue_tis_that_does_not_fold_folds_in_a_step_of_its_own(eng, cfg, pins):
    """queue_tis_v1..v5 never fold the usage counters: a scheduler pinned to one folds them in its
    pass (step fold_usage), so usage_delta does not grow while only such schedulers run. One on
    the shipped queue_tis (v7) folds inside it and has no such step."""
    from engine import calls
    from engine.scheduler import Scheduler
    from tests.reference import TI
    from tests.world import load_one_run

    load_one_run(eng, [TI(i, "d", 1, "t", i, "scheduled", 1, "default_pool", 1) for i in range(1, 4)]
                 + [TI(9, "d", 1, "t", 9, "running", 1, "default_pool", 1)])
    with eng.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM usage_delta")).scalar() > 0   # the world's inserts
    sched = Scheduler(calls.pin(eng, pins), cfg)
    summary = sched.run_once()
    assert summary["tis_queued"] == 3 and not summary["errors"] and not summary["busy"], summary
    assert sched._fold_apart == bool(pins)
    with eng.connect() as c:
        # The fold step runs after queue_tis_v5: what v5 queued is folded too. v7 folds before
        # it queues: the deltas of what it queued wait for its next call with work.
        left = c.execute(sa.text("SELECT count(*) FROM usage_delta")).scalar()
        assert left == 0 if pins else left > 0
        assert c.execute(sa.text("SELECT * FROM usage_drift")).all() == []
    sched.stop()




@pytest.mark.parametrize("first", ["pool", "ti"])
@pytest.mark.parametrize("flag, move", [(True, "running->deferred"), (True, "deferred->running"),
                                        (False, "running->deferred"), (False, "deferred->running"),
                                        (True, "insert deferred")])
def test_a_ti_entering_or_leaving_deferred_while_its_pool_flag_changes_is_counted_once(eng, first, flag, move):
    """Two transactions at once: one sets pool p2's include_deferred to `flag`, the other moves a TI
    of p2 into or out of `deferred` (or inserts it deferred); either starts first and holds its
    transaction open while the other runs. Whichever order, the counters equal the recount once
    both committed. (Before revision 0044 a TI entering `deferred` while the flag's change was open
    read the old flag and the change's count missed it: usage_drift had 5 rows.) The second one
    waits for the first, or runs through: the test waits for either, never for a time."""
    import threading

    dialect = db.dialect_dir(eng)
    old_state, new_state = ("deferred", "running") if move == "deferred->running" else ("running", "deferred")
    with eng.begin() as c:
        setup(c)
        c.execute(sa.text("UPDATE pool SET include_deferred = :f WHERE name = 'p2'"), {"f": not flag})
        if move != "insert deferred":
            c.execute(sa.text("INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, "
                              "priority_weight, pool, pool_slots, queue, executor, run_after) VALUES (1, 2, 'd', "
                              "'r2', 'u', 0, :s, 1, 'p2', 2, 'default', 'default', '2026-01-01')"), {"s": old_state})
    change_pool = sa.text("UPDATE pool SET include_deferred = :f WHERE name = 'p2'").bindparams(f=flag)
    move_ti = (sa.text("INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, "
                       "priority_weight, pool, pool_slots, queue, executor, run_after) VALUES (1, 2, 'd', 'r2', 'u', "
                       "0, 'deferred', 1, 'p2', 2, 'default', 'default', '2026-01-01')")
               if move == "insert deferred" else
               sa.text("UPDATE task_instance SET state = :s WHERE id = 1").bindparams(s=new_state))
    held, second = (change_pool, move_ti) if first == "pool" else (move_ti, change_pool)
    outcome = {}

    def run_second():
        try:
            with eng.connect() as c:
                outcome["pid"] = c.execute(sa.text(SESSION_ID[dialect])).scalar()
                c.commit()
                c.execute(second)
                c.commit()
            outcome["done"] = True
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = exc

    holder = eng.connect()
    tx = holder.begin()
    holder.execute(held)
    thread = threading.Thread(target=run_second)
    thread.start()
    try:
        until_waiting_or_done(eng, thread, outcome, "pid")   # the second one waits for the first, or ran through
        tx.commit()
    finally:
        holder.close()
        thread.join(60)
    assert outcome.get("done"), outcome
    with eng.begin() as c:
        assert drift(c) == []
        fold(c)
        assert drift(c) == []
