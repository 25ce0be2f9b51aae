"""finish_tis (the named statement; finish_tis_v3, and v1 pinned) on both dialects: many tries'
outcomes in one call, each ending its try exactly as finish_ti_v3 would (states, retries, history,
results), fenced per try: a late or duplicate report in a batch never changes a newer try."""
from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import calls, db, wakeup
from tests.helpers import claim, claimed_python_tasks, sql, tick
from tests.world import T0


def finish_batch(eng, tries, max_bytes=None, now=None) -> list[tuple]:
    """tries: (ti, exit_code, timed_out, reason, result) each; rows (ti_id, try_number, state)."""
    with db.connect(eng) as conn:
        rows = db.run(conn, "finish_tis", ti_ids=[t[0].ti_id for t in tries],
                      try_numbers=[t[0].try_number for t in tries], exit_codes=[t[1] for t in tries],
                      timed_outs=[t[2] for t in tries], reasons=[t[3] for t in tries],
                      results=[t[4] for t in tries], now=now, max_bytes=max_bytes).all()
    return [tuple(r) for r in rows]


def setup_dag(eng, cfg, tmp_path, names, retries=None) -> dict:
    return claimed_python_tasks(eng, cfg, tmp_path / "dags", names, retries)


def history(eng) -> dict:
    rows = sql(eng, "SELECT task_id, try_number, state FROM task_instance_history WHERE dag_id = 'b'")
    return sorted((r.task_id, r.try_number, r.state) for r in rows)


def test_a_batch_ends_each_try_as_finish_ti_would(eng, cfg, tmp_path):
    names = ["ok", "result", "skip", "fail", "retry", "timeout", "nan", "big"]
    tis = setup_dag(eng, cfg, tmp_path, names, retries={"retry": 1})
    batch = [(tis["ok"], 0, False, None, None), (tis["result"], 0, False, None, '{"n": [1, 2.5, "s"]}'),
             (tis["skip"], 99, False, None, None), (tis["fail"], 2, False, "it broke", None),
             (tis["retry"], 1, False, None, None), (tis["timeout"], 0, True, None, None),
             (tis["nan"], 0, False, None, '{"n": NaN}'), (tis["big"], 0, False, None, json.dumps("x" * 200))]
    rows = finish_batch(eng, batch[::-1], max_bytes=100)  # any order in: TI id order out
    assert [r[0] for r in rows] == sorted(t.ti_id for t in tis.values())
    by_id = {r[0]: r for r in rows}
    got = {n: by_id[t.ti_id][2] for n, t in tis.items()}
    assert got == {"ok": "success", "result": "success", "skip": "skipped", "fail": "failed",
                   "retry": "up_for_retry", "timeout": "failed", "nan": "failed", "big": "failed"}
    assert all(by_id[t.ti_id][1] == t.try_number for t in tis.values())
    stored = sql(eng, "SELECT task_id, value FROM task_results WHERE dag_id = 'b'")
    assert {r.task_id: json.loads(r.value) if isinstance(r.value, str) else r.value for r in stored} == \
        {"result": {"n": [1, 2.5, "s"]}}
    why = dict(sql(eng, "SELECT task_id, state_reason FROM task_instance WHERE dag_id = 'b'"))
    assert why["fail"] == "it broke" and why["timeout"] == "execution_timeout exceeded"
    assert why["nan"].startswith("the task's result is not plain JSON")
    assert why["big"].startswith("the task's result is 202 bytes, more than max_result_bytes (100)")
    retry_at = sql(eng, "SELECT retry_at FROM task_instance WHERE id = :i", i=tis["retry"].ti_id)[0][0]
    assert retry_at is not None
    assert len(history(eng)) == len(names)  # one history row per finished try


def test_late_and_duplicate_reports_change_nothing(eng, cfg, tmp_path):
    tis = setup_dag(eng, cfg, tmp_path, ["a", "b", "c"], retries={"a": 2})
    a, b, c = tis["a"], tis["b"], tis["c"]
    # try 1 of a fails (retry), is scheduled again and claimed as try 2
    assert finish_batch(eng, [(a, 1, False, None, None)]) == [(a.ti_id, a.try_number, "up_for_retry")]
    tick(eng, cfg)
    (a2,) = claim(eng)
    assert (a2.ti_id, a2.try_number) == (a.ti_id, a.try_number + 1)
    # A batch with a late report of try 1 (success), b twice (the second is stale), c once.
    rows = finish_batch(eng, [(a, 0, False, None, '{"late": 1}'), (b, 0, False, None, None),
                              (c, 1, False, None, None), (b, 1, False, None, None)])
    assert sorted(rows, key=lambda r: (r[0], r[2] is None)) == [
        (a.ti_id, a.try_number, None), (b.ti_id, b.try_number, "success"), (b.ti_id, b.try_number, None),
        (c.ti_id, c.try_number, "failed")]
    state = dict(sql(eng, "SELECT task_id, state FROM task_instance WHERE dag_id = 'b'"))
    assert state == {"a": "running", "b": "success", "c": "failed"}  # try 2 of a untouched
    assert sql(eng, "SELECT count(*) FROM task_results WHERE dag_id = 'b'")[0][0] == 0
    # the whole batch again: every report is stale now
    assert [r[2] for r in finish_batch(eng, [(b, 0, False, None, None), (c, 1, False, None, None)])] == [None, None]
    assert history(eng) == [("a", a.try_number, "failed"), ("b", b.try_number, "success"),
                            ("c", c.try_number, "failed")]
    assert finish_batch(eng, [(a2, 0, False, None, None)]) == [(a.ti_id, a2.try_number, "success")]


def test_an_empty_batch_and_arrays_of_different_lengths(eng, cfg, tmp_path):
    tis = setup_dag(eng, cfg, tmp_path, ["a"])
    assert finish_batch(eng, []) == []
    with pytest.raises(Exception, match="different lengths"):
        with db.connect(eng) as conn:
            db.run(conn, "finish_tis", ti_ids=[tis["a"].ti_id], try_numbers=[tis["a"].try_number], exit_codes=[],
                   timed_outs=[False], reasons=[None], results=[None], now=None, max_bytes=None).all()
    assert dict(sql(eng, "SELECT task_id, state FROM task_instance WHERE dag_id = 'b'")) == {"a": "running"}


def test_a_batch_wakes_the_scheduler_once_it_commits(eng, cfg, tmp_path, dialect):
    if dialect != "postgresql":
        pytest.skip("MySQL/MariaDB have no LISTEN/NOTIFY: the scheduler polls")
    tis = setup_dag(eng, cfg, tmp_path, ["a"])
    listener = wakeup.Listener(eng, "listen_scheduler")
    try:
        assert listener.open()
        listener.wait(0.01)  # whatever the setup sent
        assert finish_batch(eng, [(tis["a"], 0, False, None, None)]) == [(tis["a"].ti_id, tis["a"].try_number,
                                                                          "success")]
        assert listener.wait(60) is True
    finally:
        listener.close()


# The named query's version (finish_tis_v3: the whole batch in a fixed number of statements; on
# PostgreSQL it calls v2, which does that there) against finish_tis_v1 (one finish_ti_v3 call per
# element): the same random world and batch, each applied in a transaction that is rolled back,
# must leave the same rows, TIs, history and results.
PROPS = ["ok", "p1", "p2", "p3", "p4", "p5"]
STATES = ["running"] * 4 + ["queued", "success", "up_for_retry"]
DELAYS = [0, 5, 1e20]  # and, on PostgreSQL, NaN and infinity (finish_ti_v3 clamps them)
RESULTS = [None, None, '{"a": [1, 2.5]}', '"' + "x" * 40 + '"', "NaN", "[1,", "null"]


def _snapshot(conn) -> tuple:
    tis = conn.execute(sa.text(
        "SELECT id, state, try_number, end_date, exit_code, retry_at, state_reason, updated_at "
        "FROM task_instance WHERE dag_id = 'b' ORDER BY id")).all()
    hist = conn.execute(sa.text(
        "SELECT ti_id, try_number, state, pool, pool_slots, queued_at, start_date, end_date, exit_code, "
        "hostname, worker_job_id, log_path, reason FROM task_instance_history ORDER BY id")).all()
    results = conn.execute(sa.text("SELECT ti_id, try_number, value, created_at FROM task_result ORDER BY ti_id")).all()
    return [tuple(r) for r in tis], [tuple(r) for r in hist], [tuple(r) for r in results]


@pytest.fixture
def props(eng, cfg, tmp_path):
    tis = setup_dag(eng, cfg, tmp_path, PROPS, retries={n: 1 for n in PROPS[1:]})
    return [tis[n] for n in PROPS]


@pytest.fixture
def v1_eng(eng):
    return calls.pin(eng, "finish_tis=1")  # as procedure_versions does


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_named_version_decides_every_batch_as_v1_does(eng, v1_eng, props, dialect, data):
    delays = DELAYS + ([float("nan"), float("inf")] if dialect == "postgresql" else [])
    world = data.draw(st.lists(st.tuples(st.sampled_from(STATES), st.integers(1, 3), st.integers(0, 3),
                                         st.sampled_from(delays), st.booleans(), st.sampled_from([None, 7, 1e9]),
                                         st.booleans()),
                               min_size=len(props), max_size=len(props)), label="world")
    ids = [t.ti_id for t in props]
    tries = dict(zip(ids, (w[1] for w in world)))
    element = st.tuples(st.sampled_from(ids + [0]), st.sampled_from([0, 0, 0, -1, 1]),  # mostly the running try
                        st.sampled_from([0, 0, 1, 99, None]), st.sampled_from([False, False, True, None]),
                        st.sampled_from([None, "it broke", "y" * 4100]), st.sampled_from(RESULTS))
    batch = [(i, tries.get(i, 1) + off, *rest) for i, off, *rest in
             data.draw(st.lists(element, max_size=9), label="batch")]
    max_bytes = data.draw(st.sampled_from([None, 30]), label="max_bytes")
    outcomes = []
    for caller in (v1_eng, eng):  # v1, then the named query's version
        with caller.connect() as conn:
            tx = conn.begin()
            for ti_id, (state, try_number, max_tries, delay, backoff, max_delay, has_result) in zip(ids, world):
                conn.execute(sa.text("UPDATE task_instance SET state = :s, try_number = :t, max_tries = :m "
                                     "WHERE id = :i"), {"s": state, "t": try_number, "m": max_tries, "i": ti_id})
                conn.execute(sa.text("UPDATE task SET retry_delay = :d, retry_exponential_backoff = :b, "
                                     "max_retry_delay = :x WHERE dag_id = 'b' AND task_id = "
                                     "(SELECT task_id FROM task_instance WHERE id = :i)"),
                             {"d": delay, "b": backoff, "x": max_delay, "i": ti_id})
                if has_result:
                    conn.execute(sa.text("INSERT INTO task_result (ti_id, try_number, value, created_at) "
                                         "VALUES (:i, 1, '7', :t)"), {"i": ti_id, "t": T0})
            rows = db.run(conn, "finish_tis", ti_ids=[e[0] for e in batch], try_numbers=[e[1] for e in batch],
                          exit_codes=[e[2] for e in batch], timed_outs=[e[3] for e in batch],
                          reasons=[e[4] for e in batch], results=[e[5] for e in batch], now=T0,
                          max_bytes=max_bytes).all()
            outcomes.append(([tuple(r) for r in rows], _snapshot(conn)))
            tx.rollback()
    assert outcomes[0] == outcomes[1]
