"""Each limit on its own, and Airflow's starvation cases, against queue_tis_v1 and queue_tis_v2
(still installed for schedulers of earlier releases) and queue_tis_v3; then what only v2 and
later get right (through the named query, v3): ids with dots, and TIs that nobody can run
(unknown pool or executor, removed task or DAG)."""
from __future__ import annotations

from collections import Counter

import pytest
import sqlalchemy as sa

from engine import db
from tests.reference import TI, World, greedy
from tests.world import call_queue_tis, load_world, queue


def world(tis, pools=None, parallelism=None, dags=None, tasks=None, runs=None) -> World:
    pools = {"default_pool": (128, False), **(pools or {})}
    dags = dags or {"d": (None, False)}
    runs = runs or {1: ("d", "running", 0)}
    task_ids = {(t.dag_id, t.task_id) for t in tis}
    tasks = {k: (None, None) for k in task_ids} | (tasks or {})
    return World(pools, parallelism or {"default": None}, dags, tasks, runs, tis)


def tis_of(n, start=1, **kw):
    base = dict(dag_id="d", run=1, task_id="t", state="scheduled", priority_weight=1, pool="default_pool", pool_slots=1)
    base.update(kw)
    out = []
    for i in range(n):
        attrs = dict(base)
        if "map_index" not in kw:
            attrs["map_index"] = i
        out.append(TI(id=start + i, **attrs))
    return out


@pytest.fixture(params=[1, 2, 3], ids=["v1", "v2", "v3"])
def version(request) -> int:
    """The queue_tis version under test: each must pass the cases with dot-free ids."""
    return request.param


def check(eng, version, w, max_tis=512):
    load_world(eng, w)
    got = queue(eng, max_tis, version)
    assert sorted(got) == sorted(greedy(w, max_tis))
    return got


def test_pool_counts_pool_slots_not_rows(eng, version):
    w = world(tis_of(5, pool="p", pool_slots=2), pools={"p": (5, False)})
    assert len(check(eng, version, w)) == 2  # 2 + 2 = 4 <= 5; a third would need 6


def test_pool_counts_running_and_queued_and_deferred_when_included(eng, version):
    busy = tis_of(1, start=1, task_id="a", state="running", pool="p", pool_slots=2) + \
        tis_of(1, start=2, task_id="b", state="deferred", pool="p", pool_slots=2)
    waiting = tis_of(4, start=10, task_id="c", pool="p")
    assert len(check(eng, version, world(busy + waiting, pools={"p": (5, True)}))) == 1
    assert len(check(eng, version, world(busy + waiting, pools={"p": (5, False)}))) == 3


def test_unlimited_pool(eng, version):
    assert len(check(eng, version, world(tis_of(50, pool="p", pool_slots=4), pools={"p": (-1, False)}))) == 50


def test_ti_wider_than_its_pool_never_blocks_others(eng, version):
    wide = tis_of(1, start=1, task_id="wide", pool="p", pool_slots=4, priority_weight=9)
    narrow = tis_of(3, start=2, task_id="narrow", pool="p", pool_slots=1)
    got = check(eng, version, world(wide + narrow, pools={"p": (3, False)}))
    assert sorted(got) == [2, 3, 4]


def test_max_active_tasks_is_per_run(eng, version):
    tis = tis_of(5, run=1, start=1) + tis_of(5, run=2, start=10)
    w = world(tis, dags={"d": (2, False)}, runs={1: ("d", "running", 0), 2: ("d", "running", 1)})
    got = check(eng, version, w)
    assert Counter(1 if i < 10 else 2 for i in got) == {1: 2, 2: 2}


def test_max_active_tis_per_dag_spans_runs(eng, version):
    tis = tis_of(3, run=1, start=1) + tis_of(3, run=2, start=10)
    w = world(tis, tasks={("d", "t"): (2, None)}, runs={1: ("d", "running", 0), 2: ("d", "running", 1)})
    assert sorted(check(eng, version, w)) == [1, 2]


def test_max_active_tis_per_dagrun_limits_mapped_instances(eng, version):
    tis = tis_of(6, run=1, start=1) + tis_of(6, run=2, start=10)
    w = world(tis, tasks={("d", "t"): (None, 2)}, runs={1: ("d", "running", 0), 2: ("d", "running", 0)})
    assert sorted(check(eng, version, w)) == [1, 2, 10, 11]


def test_executor_parallelism(eng, version):
    tis = tis_of(2, start=1, task_id="busy", state="running") + tis_of(10, start=10)
    assert len(check(eng, version, world(tis, parallelism={"default": 5}))) == 3


def test_max_tis_per_call(eng, version):
    assert len(check(eng, version, world(tis_of(40)), max_tis=7)) == 7


def test_paused_dag_and_queued_run_are_not_candidates(eng, version):
    tis = tis_of(2, dag_id="paused", run=1, start=1) + tis_of(2, dag_id="d", run=2, start=10)
    w = world(tis, dags={"paused": (None, True), "d": (None, False)},
              runs={1: ("paused", "running", 0), 2: ("d", "queued", 0)})
    assert check(eng, version, w) == []


def test_priority_then_run_after_then_map_index_order(eng, version):
    tis = [TI(1, "d", 2, "t", 0, "scheduled", 1, "p", 1), TI(2, "d", 1, "t", 1, "scheduled", 1, "p", 1),
           TI(3, "d", 1, "t", 0, "scheduled", 1, "p", 1), TI(4, "d", 2, "u", 0, "scheduled", 5, "p", 1)]
    w = world(tis, pools={"p": (3, False)}, runs={1: ("d", "running", 0), 2: ("d", "running", 5)})
    assert sorted(check(eng, version, w)) == [2, 3, 4]  # priority 5 first, then run 1's map 0 and 1


def test_airflow_45636_blocked_pool_does_not_starve_an_idle_one(eng, version):
    """Two 20-slot pools; A has 19 busy slots and 1,000 waiting TIs at priority 2; B is idle with
    100 TIs at priority 1. Airflow's first call queues 1 TI; ours queues 1 of A and 20 of B."""
    running = tis_of(19, start=1, task_id="a_busy", pool="A", state="running")
    a = tis_of(1000, start=100, task_id="a", pool="A", priority_weight=2)
    b = tis_of(100, start=2000, task_id="b", pool="B", priority_weight=1)
    w = world(running + a + b, pools={"A": (20, False), "B": (20, False)})
    got = check(eng, version, w, max_tis=32)
    assert Counter("A" if i < 2000 else "B" for i in got) == {"A": 1, "B": 20}


def test_airflow_18131_dag_at_max_active_tasks_does_not_starve_others(eng, version):
    """dag_a: 200 high-priority TIs with max_active_tasks=1; other DAGs have runnable TIs."""
    a = tis_of(200, start=1, dag_id="dag_a", run=1, priority_weight=10)
    others = [t for k in range(3) for t in tis_of(30, start=1000 + 100 * k, dag_id=f"dag_{k}", run=2 + k)]
    w = world(a + others, dags={"dag_a": (1, False), **{f"dag_{k}": (None, False) for k in range(3)}},
              runs={1: ("dag_a", "running", 0), **{2 + k: (f"dag_{k}", "running", 0) for k in range(3)}})
    got = check(eng, version, w, max_tis=64)
    assert len(got) == 64
    assert sum(1 for i in got if i <= 200) == 1


@pytest.mark.parametrize("max_tis", [1, 3])
def test_repeated_calls_never_exceed_a_limit(eng, version, max_tis):
    w = world(tis_of(20, pool="p", pool_slots=2), pools={"p": (7, False)})
    load_world(eng, w)
    total = sum(len(queue(eng, max_tis, version)) for _ in range(10))
    assert total == 3


def test_pending_reasons_name_the_first_full_limit(eng, version):
    tis = [
        TI(1, "paused", 1, "t", -1, "scheduled", 1, "default_pool", 1),
        TI(2, "d", 2, "t", -1, "scheduled", 1, "default_pool", 1),   # run queued
        TI(3, "d", 3, "wide", -1, "scheduled", 1, "small", 3),        # pool of 2: never fits
        TI(4, "d", 3, "busy", -1, "running", 1, "full", 1),
        TI(5, "d", 3, "p", -1, "scheduled", 1, "full", 1),            # pool full
        TI(6, "m", 4, "busy", -1, "running", 1, "default_pool", 1),
        TI(7, "m", 4, "x", -1, "scheduled", 1, "default_pool", 1),    # run at max_active_tasks
        TI(8, "d", 3, "per_dag", 0, "running", 1, "default_pool", 1, "other"),
        TI(9, "d", 3, "per_dag", 1, "scheduled", 1, "default_pool", 1),  # task at per-dag limit
        TI(10, "d", 3, "per_run", 0, "running", 1, "default_pool", 1, "other"),
        TI(11, "d", 3, "per_run", 1, "scheduled", 1, "default_pool", 1),
        TI(12, "d", 3, "e", -1, "scheduled", 1, "default_pool", 1, "other"),  # executor full
        TI(13, "d", 3, "ok", -1, "scheduled", 1, "default_pool", 1),
    ]
    w = world(tis, pools={"small": (2, False), "full": (1, False)},
              parallelism={"default": None, "other": 2},
              dags={"paused": (None, True), "d": (None, False), "m": (1, False)},
              tasks={("d", "per_dag"): (1, None), ("d", "per_run"): (None, 1)},
              runs={1: ("paused", "running", 0), 2: ("d", "queued", 0), 3: ("d", "running", 0), 4: ("m", "running", 0)})
    load_world(eng, w)
    with eng.connect() as c:
        reasons = dict(c.execute(sa.text("SELECT ti_id, reason FROM pending_reasons")).all())
    assert reasons == {1: "dag paused", 2: "run not running", 3: "pool too small", 5: "pool full",
                       7: "run at max_active_tasks", 9: "task at max_active_tis_per_dag",
                       11: "task at max_active_tis_per_dagrun", 12: "executor at parallelism", 13: "runnable"}
    # The procedure agrees: of these, only the runnable one is queued.
    assert queue(eng, 100, version) == [13]


# Ids may contain dots: DAG 'x.y' with task 'z' and DAG 'x' with task 'y.z' are two partitions
# (v1 keyed both as 'x.y.z'). These run against the named query, i.e. the current version.

def _reasons(eng) -> dict:
    with eng.connect() as c:
        return dict(c.execute(sa.text("SELECT ti_id, reason FROM pending_reasons")).all())


def _over_limit(eng) -> list:
    with eng.connect() as c:
        return c.execute(sa.text("SELECT * FROM limit_usage WHERE used > cap")).all()


def test_dotted_ids_both_limited_queuing_goes_on_and_each_limit_holds(eng):
    tis = (tis_of(3, start=1, dag_id="x.y", run=1, task_id="z") + tis_of(3, start=10, dag_id="x", run=2, task_id="y.z")
           + tis_of(3, start=20, dag_id="other", run=3, task_id="t"))
    w = world(tis, dags={"x.y": (None, False), "x": (None, False), "other": (None, False)},
              tasks={("x.y", "z"): (1, None), ("x", "y.z"): (1, None)},
              runs={1: ("x.y", "running", 0), 2: ("x", "running", 0), 3: ("other", "running", 0)})
    load_world(eng, w)
    got = queue(eng, 512)
    assert sorted(got) == sorted(greedy(w, 512)) == [1, 10, 20, 21, 22]
    assert _over_limit(eng) == []
    with eng.connect() as c:
        per_task = c.execute(sa.text("SELECT dag_id, task_id, cap, used FROM limit_usage WHERE kind = 'task' "
                                     "ORDER BY dag_id, task_id")).all()
    assert [tuple(r) for r in per_task] == [("x", "y.z", 1, 1), ("x.y", "z", 1, 1)]
    assert _reasons(eng) == {i: "task at max_active_tis_per_dag" for i in (2, 3, 11, 12)}
    assert queue(eng, 512) == []  # each limit still holds on the next call


def test_dotted_ids_one_limited_and_running_the_other_is_queued(eng):
    tis = (tis_of(1, start=1, dag_id="x.y", run=1, task_id="z", state="running")
           + tis_of(1, start=2, dag_id="x.y", run=1, task_id="z", map_index=5)
           + tis_of(3, start=10, dag_id="x", run=2, task_id="y.z"))
    w = world(tis, dags={"x.y": (None, False), "x": (None, False)}, tasks={("x.y", "z"): (1, None)},
              runs={1: ("x.y", "running", 0), 2: ("x", "running", 0)})
    load_world(eng, w)
    assert _reasons(eng) == {2: "task at max_active_tis_per_dag", 10: "runnable", 11: "runnable", 12: "runnable"}
    assert sorted(queue(eng, 512)) == sorted(greedy(w, 512)) == [10, 11, 12]
    assert _over_limit(eng) == []


def test_tis_nobody_can_run_are_never_queued_and_pending_reasons_names_them(eng):
    """Unknown pool, unknown executor, task or DAG removed by a later sync (a resume too): never
    queued, named in pending_reasons; creating the pool makes its TI runnable."""
    tis = [
        TI(1, "d", 1, "t", 0, "scheduled", 5, "gone_pool", 1),            # pool row deleted
        TI(2, "d", 1, "t", 1, "scheduled", 5, "default_pool", 1, "ghost"),  # no executor row
        TI(3, "d", 1, "old", -1, "scheduled", 5, "default_pool", 1),      # task removed
        TI(4, "gone", 2, "t", 0, "scheduled", 5, "default_pool", 1),      # DAG removed
        TI(5, "gone", 2, "t", 1, "scheduled", 5, "default_pool", 1, resuming=True),
        TI(6, "d", 1, "t", 2, "scheduled", 1, "default_pool", 1),
    ]
    w = world(tis, dags={"d": (None, False), "gone": (None, False)},
              runs={1: ("d", "running", 0), 2: ("gone", "running", 0)})
    w.removed_dags = frozenset({"gone"})
    w.removed_tasks = frozenset({("d", "old")})
    load_world(eng, w)
    assert _reasons(eng) == {1: "unknown pool", 2: "unknown executor", 3: "task removed", 4: "dag removed",
                             5: "dag removed", 6: "runnable"}
    assert queue(eng, 512) == greedy(w, 512) == [6]
    with eng.begin() as c:
        c.execute(sa.text("INSERT INTO pool (name, slots, include_deferred) VALUES ('gone_pool', 1, false)"))
    assert _reasons(eng)[1] == "runnable"
    assert queue(eng, 512) == [1]


def test_twice_in_one_transaction_and_what_it_refuses(eng, version):
    """Callable twice per transaction (the second call counts what the first queued); refuses
    REPEATABLE READ and a missing lock row with one line each."""
    load_world(eng, world(tis_of(6, pool="p"), pools={"p": (4, False)}))
    with db.connect(eng) as c:
        first = call_queue_tis(c, version, max_tis=3, job_id=None, now=None)
        second = call_queue_tis(c, version, max_tis=3, job_id=None, now=None)
    assert len(first) == 3 and len(second) == 1  # the pool's last slot; nothing queued twice
    assert not {r.ti_id for r in first} & {r.ti_id for r in second}
    with eng.connect().execution_options(isolation_level="REPEATABLE READ") as c:
        with pytest.raises(sa.exc.DBAPIError, match=f"queue_tis_v{version} needs READ COMMITTED"):
            call_queue_tis(c, version, max_tis=3, job_id=None, now=None)
    with eng.begin() as c:
        c.execute(sa.text("DELETE FROM scheduler_lock WHERE name = 'queue_tis'"))
    with db.connect(eng) as c:
        with pytest.raises(sa.exc.DBAPIError, match="scheduler_lock row queue_tis is missing"):
            call_queue_tis(c, version, max_tis=3, job_id=None, now=None)


@pytest.mark.parametrize("scratch_version", [5, 6])
def test_v5_scratch_rows_left_by_earlier_calls_neither_count_nor_pile_up(eng, dialect, scratch_version):
    """queue_tis_v5 and v6 (PostgreSQL; they share the scratch tables) keep their scratch
    tables' rows past the commit: a call must ignore what an earlier call of the session left,
    and past 2 MB it truncates them."""
    if dialect != "postgresql":
        pytest.skip("MySQL's queue_tis_v5 and v6 are queue_tis_v4")
    w = world(tis_of(6, pool="p", priority_weight=2) + tis_of(6, start=20, task_id="u"), pools={"p": (3, False)})
    load_world(eng, w)
    with eng.connect() as c:
        with c.begin():  # creates the session's tables
            assert [r.ti_id for r in call_queue_tis(c, scratch_version, max_tis=0, job_id=None, now=None)] == []
        with c.begin():  # rows an earlier call might have left: full partitions, a page, a batch
            c.execute(sa.text("INSERT INTO qt5_used_pool VALUES ('p', 3), ('default_pool', 128)"))
            c.execute(sa.text("INSERT INTO qt5_page (id, pool, priority_weight) "
                              "SELECT g, 'p', 9 FROM generate_series(100000, 140000) g"))
            c.execute(sa.text("INSERT INTO qt5_cand (rank, id) SELECT g, g FROM generate_series(1, 20000) g"))
        size = "SELECT pg_total_relation_size('pg_temp.qt5_page') + pg_total_relation_size('pg_temp.qt5_cand')"
        assert c.execute(sa.text(size)).scalar() > 2 * 1024 * 1024
        c.commit()
        with c.begin():
            got = [r.ti_id for r in call_queue_tis(c, scratch_version, max_tis=512, job_id=None, now=None)]
        assert sorted(got) == sorted(greedy(w, 512)) and len(got) == 9  # 3 of p, the 6 of default_pool
        assert c.execute(sa.text(size)).scalar() < 2 * 1024 * 1024  # truncated, not just deleted
