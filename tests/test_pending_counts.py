"""The view pending_counts (revision 0061) counts what pending_reasons says TI by TI, and the
metrics view built on it gives the samples its previous text gave, on random worlds of both
dialects: removed DAGs and tasks, unknown pools and executors, paused and draining DAGs, resumes,
runs not running, full and closed pools, reservations (some stale) and TIs preempted for another."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import db
from engine.paths import SQL_DIR
from tests.helpers import pending_counts_agree, sql
from tests.reference import Reservation
from tests.test_queue_tis_model import worlds
from tests.world import load_world


def _previous_metrics(eng) -> str:
    """The metrics view as revision 0008 defined it (its text before 0061), as view metrics_0008."""
    text = (SQL_DIR / db.dialect_dir(eng) / "previous" / "0061" / "metrics.sql").read_text()
    assert "CREATE VIEW metrics AS" in text
    return text.replace("CREATE VIEW metrics AS", "CREATE VIEW metrics_0008 AS", 1)


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
    with eng.begin() as c:
        c.exec_driver_sql("DROP VIEW IF EXISTS metrics_0008")
    with eng.begin() as c:
        c.exec_driver_sql(_previous_metrics(eng))
    try:  # (one statement for both views: their "now" is the same instant)
        got = sql(eng, "SELECT 'new', metric, pool, queue, state, reason, kind, value FROM metrics "
                       "UNION ALL SELECT 'old', metric, pool, queue, state, reason, kind, value FROM metrics_0008")
    finally:
        with eng.begin() as c:
            c.exec_driver_sql("DROP VIEW metrics_0008")
    new = sorted((tuple(r[1:]) for r in got if r[0] == "new"), key=repr)
    old = sorted((tuple(r[1:]) for r in got if r[0] == "old"), key=repr)
    assert new == old


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
