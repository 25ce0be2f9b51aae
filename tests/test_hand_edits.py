"""A DBA's hand edit of a waiting TI while a queue_tis call is in flight (revision 0045).

queue_tis locks no TI it considers: it decides on the pool, width, executor and queue key it
read, and its final UPDATE checks only that each chosen TI is still scheduled. The engine never
changes those columns of a scheduled TI; a hand edit does. The trigger guard_scheduled makes such
an edit take the queue lock's row shared, so it waits for a call in flight and calls wait for it
(busy) until it commits: no call decides on values an edit changes under it.
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from engine import db
from tests.helpers import start_in_thread, until_waiting_or_done
from tests.reference import TI
from tests.world import call_queue_tis, load_one_run

# A: room for both scheduled TIs; B: one slot, held by TI 1.
WORLD = [TI(1, "d", 1, "t", 0, "running", 1, "B", 1), TI(2, "d", 1, "t", 1, "scheduled", 10, "A", 1),
         TI(3, "d", 1, "t", 2, "scheduled", 5, "A", 1)]
POOLS = {"A": (10, False), "B": (1, False)}


def _pool_use(eng) -> dict:
    with eng.connect() as c:
        return dict(c.execute(sa.text(
            "SELECT pool, SUM(pool_slots) FROM task_instance WHERE state IN ('queued', 'running') "
            "GROUP BY pool")).all())


def test_moving_a_ti_the_call_in_flight_is_queuing_never_exceeds_its_new_pool(eng):
    """A call chose TIs 2 and 3 (pool A) and its final UPDATE waits for TI 2's row (held by
    another transaction); meanwhile a DBA moves TI 3 into pool B, which is full. Before revision
    0045 the edit committed at once and the call then queued TI 3, now in B: B held 2 slots of 1.
    Now the edit waits for the call's lock; when TI 2 is let go the call reaches TI 3, which the
    edit holds: the server breaks the cycle by rolling back one of them. Either way B is never
    exceeded, and what was queued is counted."""
    load_one_run(eng, WORLD, pools=POOLS)
    blocker = eng.connect()
    tx = blocker.begin()
    blocker.execute(sa.text("SELECT id FROM task_instance WHERE id = 2 FOR UPDATE")).all()
    outcome: dict = {}
    try:
        call = start_in_thread(eng, lambda c: [r.ti_id for r in call_queue_tis(c, max_tis=8, job_id=None, now=None)],
                      outcome, "call")
        assert until_waiting_or_done(eng, call, outcome, "call_pid"), outcome  # at TI 2, in its final UPDATE
        edit = start_in_thread(eng, lambda c: c.execute(sa.text(
            "UPDATE task_instance SET pool = 'B' WHERE id = 3 AND state = 'scheduled'")).rowcount, outcome, "edit")
        until_waiting_or_done(eng, edit, outcome, "edit_pid")
        tx.rollback()
    finally:
        blocker.close()
        call.join(60)
        if "edit" in outcome or "edit_pid" in outcome:
            edit.join(60)
    failed = [k for k in ("call", "edit") if isinstance(outcome.get(k), Exception)]
    for k in failed:   # at most one side, and only the deadlock the server broke
        assert db.is_transient(outcome[k]), (k, outcome[k])
    assert len(failed) <= 1, outcome
    use = _pool_use(eng)
    assert use.get("B", 0) <= 1, (use, outcome)
    with eng.connect() as c:
        assert c.execute(sa.text("SELECT * FROM usage_drift")).all() == []
        rows = dict(c.execute(sa.text("SELECT id, state FROM task_instance WHERE id IN (2, 3)")).all())
    if "call" in failed:
        assert rows == {2: "scheduled", 3: "scheduled"} and outcome["edit"] == 1
    else:
        assert sorted(outcome["call"]) == [2, 3] and rows == {2: "queued", 3: "queued"}


@pytest.mark.parametrize("change, guarded", [
    ("pool = 'B'", True), ("pool_slots = 2", True), ("executor = 'other'", True),
    ("priority_weight = 99", True), ("run_after = run_after + INTERVAL '1' DAY", True), ("task_id = 'u'", True),
    ("updated_at = run_after", False),             # not a column a call decides on
    ("map_index = 7", False),                      # the last tie-break only (schedule_tis_v3 numbers new TIs)
    ("state = 'none'", False),                     # it stops waiting: the call's compare-and-set skips it
    ("priority_weight = priority_weight", False),  # the same values
])
def test_an_edit_of_what_a_call_decides_on_waits_for_the_queue_lock(eng, change, guarded):
    """While a transaction holds scheduler_lock('queue_tis') as a call does, an UPDATE of a
    scheduled TI that keeps it scheduled and changes its pool, width, executor, priority, run_after,
    run or task waits until it ends; any other UPDATE runs through. A call started while such an edit is
    open finds the lock busy."""
    if db.dialect_dir(eng) == "mysql":
        change = change.replace("INTERVAL '1' DAY", "INTERVAL 1 DAY")
    load_one_run(eng, WORLD, pools=POOLS)
    holder = eng.connect()
    tx = holder.begin()
    holder.execute(sa.text("SELECT name FROM scheduler_lock WHERE name = 'queue_tis' FOR UPDATE")).all()
    outcome: dict = {}
    try:
        edit = start_in_thread(eng, lambda c: c.execute(sa.text(f"UPDATE task_instance SET {change} WHERE id = 3")).rowcount,
                      outcome, "edit")
        assert until_waiting_or_done(eng, edit, outcome, "edit_pid") == guarded, outcome
    finally:
        tx.rollback()
        holder.close()
        edit.join(60)
    assert outcome["edit"] == 1, outcome
    if not guarded:
        return
    # An edit still open holds the lock shared: a call with work to do is busy until it commits.
    editor = eng.connect()
    etx = editor.begin()
    editor.execute(sa.text("UPDATE task_instance SET priority_weight = 42 WHERE id = 2"))
    try:
        with db.connect(eng) as c, pytest.raises(sa.exc.DBAPIError) as busy:
            call_queue_tis(c, max_tis=8, job_id=None, now=None)
        assert db.is_lock_busy(busy.value)
    finally:
        etx.commit()
        editor.close()
    with db.connect(eng) as c:
        assert 2 in [r.ti_id for r in call_queue_tis(c, max_tis=8, job_id=None, now=None)]
