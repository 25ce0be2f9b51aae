"""The view pending_counts (revision 0061) counts what pending_reasons says TI by TI, and the
metrics view built on it gives the samples its previous text gave, on random worlds of both
dialects: removed DAGs and tasks, unknown pools and executors, paused and draining DAGs, resumes,
runs not running, full and closed pools, reservations (some stale) and TIs preempted for another."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import db
from tests.helpers import metrics_0008_sql, pending_counts_agree, sql
from tests.reference import TI, Reservation, World
from tests.test_queue_tis_model import worlds
from tests.world import load_world


def _metrics_agree(eng) -> bool:
    """The metrics view gives exactly the rows of its previous text (one statement for both, so
    that their "now" is one instant)."""
    with eng.begin() as c:
        c.exec_driver_sql("DROP VIEW IF EXISTS metrics_0008")
        c.exec_driver_sql(metrics_0008_sql(db.dialect_dir(eng)))
    try:
        got = sql(eng, "SELECT 'new', metric, pool, queue, state, reason, kind, value FROM metrics "
                       "UNION ALL SELECT 'old', metric, pool, queue, state, reason, kind, value FROM metrics_0008")
    finally:
        with eng.begin() as c:
            c.exec_driver_sql("DROP VIEW metrics_0008")
    new = sorted((tuple(r[1:]) for r in got if r[0] == "new"), key=repr)
    old = sorted((tuple(r[1:]) for r in got if r[0] == "old"), key=repr)
    return new == old


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(w=worlds(dotted=True), data=st.data())
def test_pending_counts_and_metrics_agree_with_the_per_ti_views(eng, w, data):
    pools = sorted(w.pools) + ["gone.pool"]
    scheduled = [t for t in w.tis if t.state == "scheduled"]
    for t in data.draw(st.lists(st.sampled_from(scheduled), unique_by=lambda t: t.id, max_size=4)
                       if scheduled else st.just([])):
        pool = t.pool if data.draw(st.integers(0, 5)) else data.draw(st.sampled_from(pools))
        w.reservations.append(Reservation(t.id, pool, t.pool_slots, data.draw(st.sampled_from(["wide", "preemption"])),
                                          data.draw(st.integers(0, 9))))
    load_world(eng, w)
    # Running TIs preempted for a scheduled one: their tries are stopping (preempt_v1's state).
    running = [t for t in w.tis if t.state == "running"]
    if running and scheduled:
        for t in data.draw(st.lists(st.sampled_from(running), unique_by=lambda t: t.id, max_size=3)):
            sql(eng, "UPDATE task_instance SET state = 'preempting', preempted_for = :f WHERE id = :i",
                f=data.draw(st.sampled_from(scheduled)).id, i=t.id)
    assert pending_counts_agree(eng)
    assert _metrics_agree(eng)


def test_metrics_keep_their_rows_with_no_pool_row_at_all(eng):
    """The zero rows of MariaDB's view (every pool, one with no pool): TIs of pools that have no row
    ('unknown pool': no sample of theirs), then a deployment with no TI, task or pool row at all
    (no per-pool sample; the deployment-wide ones are still there)."""
    tis = [TI(1, "d", 1, "t", 0, "scheduled", 1, "gone", 1), TI(2, "d", 1, "t", 1, "scheduled", 1, "gone", 2),
           TI(3, "d", 1, "t", 2, "running", 1, "gone", 1), TI(4, "d", 1, "t", 3, "queued", 1, "other", 1)]
    load_world(eng, World({"default_pool": (128, False)}, {"default": None}, {"d": (None, False)}, {("d", "t"): (None, None)},
                          {1: ("d", "running", 0)}, tis))
    assert pending_counts_agree(eng) and _metrics_agree(eng)
    assert {r[0] for r in sql(eng, "SELECT pool FROM metrics WHERE pool IS NOT NULL")} == {"default_pool", "gone", "other"}
    assert sql(eng, "SELECT metric FROM metrics WHERE pool IN ('gone', 'other') AND metric <> 'task_instances'") == []
    for table in ("task_instance", "task", "pool"):
        sql(eng, f"DELETE FROM {table}")
    assert pending_counts_agree(eng) and _metrics_agree(eng)
    names = {r[0] for r in sql(eng, "SELECT metric FROM metrics")}
    assert {"scheduler_tasks_starving", "oldest_ti_age_seconds"} <= names
    assert not names & {"pool_scheduled_slots", "pool_starving_tasks", "pool_open_slots", "task_instances"}


def test_the_metrics_and_status_queries_run_with_jit_off(eng):
    """PostgreSQL compiled the metrics view's large plan with JIT when its estimate passed
    jit_above_cost (3.5 s of a 4.3 s scrape at 1,000,000 scheduled TIs): both named queries turn
    it off for their transaction."""
    for name in ("metrics", "status_pending"):
        with db.connect(eng) as conn:
            rows = db.run(conn, name).all()
            if db.dialect_dir(eng) == "postgresql":
                assert conn.exec_driver_sql("SHOW jit").scalar() == "off", name
        assert rows is not None


def test_names_that_share_their_first_100_characters_keep_their_own_limits(eng):
    """MySQL/MariaDB's two views (revision 0062) join the pool, task and executor limits on a
    name's first 100 characters, then compare the whole names: two pools, two tasks of one DAG and
    two executors whose names differ only after that, one of each full, must each give their own
    reason, once a TI (a join on the prefix alone gives each TI two rows here)."""
    pre = "p" * 100
    full_pool, open_pool = pre + ".full", pre + ".open"
    dag = "d" * 100 + ".dag"
    full_task, open_task = "t" * 100 + ".full", "t" * 100 + ".open"
    full_ex, open_ex = "e" * 100 + ".full", "e" * 100 + ".open"
    tis = [TI(1, dag, 1, full_task, 0, "running", 1, open_pool, 1, open_ex),   # fills full_task
           TI(2, dag, 1, open_task, 0, "running", 1, full_pool, 1, full_ex),   # fills full_pool, full_ex
           TI(3, dag, 1, open_task, 1, "scheduled", 1, full_pool, 1, open_ex),
           TI(4, dag, 1, full_task, 1, "scheduled", 1, open_pool, 1, open_ex),
           TI(5, dag, 1, open_task, 2, "scheduled", 1, open_pool, 1, full_ex),
           TI(6, dag, 1, open_task, 3, "scheduled", 1, open_pool, 1, open_ex)]
    load_world(eng, World({"default_pool": (128, False), full_pool: (1, False), open_pool: (10, False)},
                          {"default": None, full_ex: 1, open_ex: None},
                          {dag: (None, False)}, {(dag, full_task): (1, None), (dag, open_task): (None, None)},
                          {1: (dag, "running", 0)}, tis))
    assert sorted(map(tuple, sql(eng, "SELECT ti_id, reason FROM pending_reasons"))) == [
        (3, "pool full"), (4, "task at max_active_tis_per_dag"), (5, "executor at parallelism"), (6, "runnable")]
    assert pending_counts_agree(eng)
    assert sorted(map(tuple, sql(eng, "SELECT pool, reason, tis FROM pending_counts"))) == [
        (full_pool, "pool full", 1), (open_pool, "executor at parallelism", 1), (open_pool, "runnable", 1),
        (open_pool, "task at max_active_tis_per_dag", 1)]
