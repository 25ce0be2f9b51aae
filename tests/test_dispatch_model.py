"""dispatch_tis hands a dispatcher exactly what is due: the first `limit` queued TIs of its
executor, by priority_weight DESC, queued_at, id, among those with no message in flight (no
ti_dispatch row, a row of an earlier queued period, or one sent at least `resend_after` ago),
whatever queues and executors the TIs have. Checked against a model on random states, queues,
executors, priorities, queue-time ties and dispatch rows (fresh, stale, exactly at the cutoff,
from an earlier period), for the version the named query calls (dispatch_tis_v2: one read of the
claim index per queue) and for dispatch_tis_v1 (every queued TI read)."""
from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import calls, db
from tests.helpers import sql, started_run
from tests.world import T0

N = 14
RESEND = 20.0
NOW = T0 + timedelta(seconds=100)
# A TI's ti_dispatch row: None (never sent) or (seconds before NOW it was sent, same queued period?).
SENT = st.one_of(st.none(), st.tuples(st.sampled_from([0.0, 5.0, RESEND, RESEND + 0.001, 300.0]), st.booleans()))


@pytest.fixture
def tis(eng, tmp_path):
    return started_run(eng, tmp_path / "dags", 'dispatches', N)


ti_rows = st.lists(st.tuples(st.sampled_from(["queued"] * 4 + ["scheduled", "running"]), st.sampled_from("abc"),
                             st.integers(1, 4), st.integers(0, 3),
                             st.sampled_from(["celery"] * 3 + ["default", "other"]), SENT, st.integers(0, 5)),
                   min_size=N, max_size=N)


@pytest.mark.parametrize("version", [None, 1], ids=["named-query", "v1"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=ti_rows, limit=st.integers(0, N + 2))
def test_dispatch_sends_the_first_due_tis_of_its_executor(eng, tis, version, rows, limit):
    with eng.begin() as conn:
        conn.execute(sa.text("DELETE FROM ti_dispatch"))
        for ti_id, (state, queue, pw, sec, executor, sent, attempt) in zip(tis, rows):
            queued_at = T0 + timedelta(seconds=sec)
            conn.execute(sa.text("UPDATE task_instance SET state = :s, queue = :q, priority_weight = :p, "
                                 "queued_at = :t, executor = :e WHERE id = :i"),
                         {"s": state, "q": queue, "p": pw, "t": queued_at, "e": executor, "i": ti_id})
            if sent is not None:
                ago, same_period = sent
                conn.execute(sa.text("INSERT INTO ti_dispatch (ti_id, executor, queued_at, token, attempt, sent_at) "
                                     "VALUES (:i, :e, :q, :tok, :a, :s)"),
                             {"i": ti_id, "e": executor, "tok": f"old-{ti_id}", "a": attempt,
                              "q": queued_at if same_period else queued_at - timedelta(seconds=7),
                              "s": NOW - timedelta(seconds=ago)})

    def due(row) -> bool:
        state, _queue, _pw, _sec, executor, sent, _attempt = row
        in_flight = sent is not None and sent[1] and sent[0] < RESEND
        return state == "queued" and executor == "celery" and not in_flight

    owed = sorted((-row[2], row[3], ti_id) for ti_id, row in zip(tis, rows) if due(row))[:limit]
    caller = eng if version is None else calls.pin(eng, f"dispatch_tis={version}")
    with db.connect(caller) as conn:
        got = db.run(conn, "dispatch_tis", executor="celery", limit=limit, resend_after=RESEND, now=NOW).all()
    assert [r.ti_id for r in got] == [ti_id for _, _, ti_id in owed]  # in dispatch order
    by_id = dict(zip(tis, rows))
    for r in got:
        state, queue, _pw, _sec, _executor, sent, attempt = by_id[r.ti_id]
        assert r.queue == queue and r.attempt == (1 if sent is None else attempt + 1)
        assert r.token != f"old-{r.ti_id}"
    assert len({r.token for r in got}) == len(got)
    stored = dict(sql(eng, "SELECT ti_id, token FROM ti_dispatch"))
    assert all(stored[r.ti_id] == r.token for r in got)
    untouched = {ti_id for ti_id, row in zip(tis, rows) if row[5] is not None} - {r.ti_id for r in got}
    assert all(stored[ti_id] == f"old-{ti_id}" for ti_id in untouched)
    assert sorted(sql(eng, "SELECT id, state FROM task_instance WHERE dag_id = 'dispatches'")) == \
        sorted((ti_id, row[0]) for ti_id, row in zip(tis, rows))  # dispatching changes no state
