"""fire_triggers (the named statement; fire_triggers_v2) against fire_triggers_v1 pinned, on both
dialects: random worlds of deferred TIs and random batches of fired triggers (resumes, errors,
final successes and failures, events that are not JSON or too big, triggers already fired, TIs
that no longer wait), each applied in a transaction that is rolled back, must leave the same
rows: triggers, TIs, history and results."""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import calls, db
from tests.deferral import defer, quoted
from tests.helpers import claimed_python_tasks, sql
from tests.world import T0

NAMES = ["k1", "k2", "k3", "s1", "s2", "s3"]  # k*: a pool with include_deferred (resumes keep their slot)
STATES = ["deferred"] * 5 + ["running", "success"]
EVENTS = [None, '{"a": [1, 2.5]}', "null", '"' + "x" * 40 + '"', "[1,", '{"n": NaN}', "7"]
ERRORS = [None, None, None, "it broke", "y" * 4100]
FINALS = [None, None, "success", "success", "failed", "maybe"]


@pytest.fixture
def world(eng, cfg, tmp_path):
    """Six TIs of one run, deferred each to its own trigger; (TI ids, trigger ids) in task order."""
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('keep', 10, true)")
    tis = claimed_python_tasks(eng, cfg, tmp_path / "dags", NAMES, retries={n: 1 for n in NAMES},
                               pools={n: "keep" for n in NAMES if n.startswith("k")})
    for ti in tis.values():
        assert defer(eng, ti) == "deferred"
    rows = {r.task_id: (r.id, r.trigger_id) for r in sql(eng, "SELECT task_id, id, trigger_id FROM task_instance")}
    return [rows[n][0] for n in NAMES], [rows[n][1] for n in NAMES]


@pytest.fixture
def v1_eng(eng):
    return calls.pin(eng, "fire_triggers=1")  # as procedure_versions does


def _snapshot(conn, trig: str) -> tuple:
    tis = conn.execute(sa.text(
        "SELECT id, state, try_number, end_date, exit_code, retry_at, state_reason, updated_at, queued_at, "
        "queued_by_job_id, priority_weight, next_method, next_kwargs, trigger_id FROM task_instance ORDER BY id")).all()
    triggers = conn.execute(sa.text(f"SELECT id, fired_at, event, error FROM {trig} ORDER BY id")).all()
    hist = conn.execute(sa.text(
        "SELECT ti_id, try_number, state, pool, pool_slots, queued_at, start_date, end_date, exit_code, "
        "hostname, worker_job_id, log_path, reason FROM task_instance_history ORDER BY id")).all()
    results = conn.execute(sa.text("SELECT ti_id, try_number, value, created_at FROM task_result ORDER BY ti_id")).all()
    return tuple([tuple(r) for r in rows] for rows in (tis, triggers, hist, results))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_named_version_fires_every_batch_as_v1_does(eng, v1_eng, world, dialect, data):
    ti_ids, trigger_ids = world
    trig = quoted(eng, "trigger")
    rarely = st.sampled_from([False, False, False, True])
    state = st.tuples(st.sampled_from(STATES), st.integers(1, 3), st.integers(0, 3), st.sampled_from([0, 5, 1e20]),
                      st.booleans(), st.booleans(), rarely, rarely)
    ws = data.draw(st.lists(state, min_size=len(ti_ids), max_size=len(ti_ids)), label="world")
    errors = ERRORS + (["with a NUL \x00 inside"] if dialect != "postgresql" else [])
    fired = data.draw(st.lists(st.sampled_from(trigger_ids + [999999]), unique=True, max_size=7), label="triggers")
    batch = [(t, data.draw(st.sampled_from(EVENTS)), data.draw(st.sampled_from(errors)),
              data.draw(st.sampled_from(FINALS))) for t in sorted(fired)]
    max_bytes = data.draw(st.sampled_from([None, 30]), label="max_bytes")
    outcomes = []
    for caller in (v1_eng, eng):  # v1, then the named query's version
        with caller.connect() as conn:
            tx = conn.begin()
            for ti_id, trigger_id, (st_, try_number, max_tries, delay, backoff, has_result, was_fired, moved) in zip(
                    ti_ids, trigger_ids, ws):
                conn.execute(sa.text("UPDATE task_instance SET state = :s, try_number = :t, max_tries = :m, "
                                     "trigger_id = :g WHERE id = :i"),
                             {"s": st_, "t": try_number, "m": max_tries, "i": ti_id, "g": None if moved else trigger_id})
                conn.execute(sa.text("UPDATE task SET retry_delay = :d, retry_exponential_backoff = :b "
                                     "WHERE dag_id = 'b' AND task_id = (SELECT task_id FROM task_instance WHERE id = :i)"),
                             {"d": delay, "b": backoff, "i": ti_id})
                if has_result:
                    conn.execute(sa.text("INSERT INTO task_result (ti_id, try_number, value, created_at) "
                                         "VALUES (:i, 1, '7', :t)"), {"i": ti_id, "t": T0})
                if was_fired:
                    conn.execute(sa.text(f"UPDATE {trig} SET fired_at = :t WHERE id = :g"), {"t": T0, "g": trigger_id})
            rows = db.run(conn, "fire_triggers", trigger_ids=[b[0] for b in batch], events=[b[1] for b in batch],
                          errors=[b[2] for b in batch], finals=[b[3] for b in batch], now=T0, boost=1000,
                          max_bytes=max_bytes).all()
            outcomes.append(([tuple(r) for r in rows], _snapshot(conn, trig)))
            tx.rollback()
    assert outcomes[0] == outcomes[1]
    assert [r[0] for r in outcomes[1][0]] == [b[0] for b in batch]  # one row per trigger, in input order


def test_a_batch_of_final_events_ends_every_try_once(eng, world):
    """Every try ended, one history row each, results stored for the successes; a second call
    with the same triggers changes nothing."""
    ti_ids, trigger_ids = world
    finals = ["success", "failed", "success", None, "success", "failed"]
    events = ['{"i": 1}', '"no"', "null", "{}", '"x"', "[]"]
    errors = [None, None, None, "boom", None, None]

    def fire():
        with db.connect(eng) as conn:
            return [tuple(r) for r in db.run(conn, "fire_triggers", trigger_ids=trigger_ids, events=events,
                                             errors=errors, finals=finals, now=None, boost=1000, max_bytes=None)]

    assert fire() == list(zip(trigger_ids, ["success", "up_for_retry", "success", "up_for_retry", "success",
                                            "up_for_retry"]))
    assert fire() == [(t, None) for t in trigger_ids]
    hist = sql(eng, "SELECT ti_id, state, exit_code FROM task_instance_history ORDER BY ti_id")
    assert [tuple(r) for r in hist] == list(zip(ti_ids, ["success", "failed", "success", "failed", "success", "failed"],
                                                [0, 1, 0, None, 0, 1]))
    stored = {r.ti_id: r.value for r in sql(eng, "SELECT ti_id, value FROM task_result")}
    assert sorted(stored) == [ti_ids[0], ti_ids[4]]  # JSON null stores no result
