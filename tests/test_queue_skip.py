"""Skip entries: queue_tis_v11's on PostgreSQL, queue_tis_v18's on MySQL/MariaDB (v15's, with
only what a call costs changed in v16 and v17, and v18 taking a new entry's gate before it reads
the entry's TIs again; docs/critical-section.md, "queue_tis_v11", "queue_tis_v15" to "queue_tis_v18").

An entry lets a call read a pool past TIs that earlier calls found refused (full partitions, too
wide) without reading them again. It must never hide a TI the greedy rule would queue: not when a
partition it relies on gets room, a limit changes, nor when TIs are written scheduled ahead of its
bound, by a transaction committed before the call or still open while it ran (PostgreSQL: the
writer's transaction id; MySQL/MariaDB: the pool's gate row and the log). The property test
drives worlds with refused heads through random events between calls and compares every call
with the reference model; the others pin down each way an entry stops holding, and (MySQL/MariaDB)
the deadlock between a writer and the call making an entry.
"""
from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import db
from tests.helpers import SESSION_ID, until_waiting_or_done
from tests.reference import TI, World, greedy_v4
from tests.test_queue_tis_model import _usage
from tests.world import T0, load_world, queue

CALL = {"postgresql": ["SELECT set_config('engine.skip_min', CAST(:skip_min AS text), true)",
                      "SELECT * FROM queue_tis_v27(:max_tis, NULL, :now, :pf)"],
        "mysql": ["SET @engine_skip_min = :skip_min", "CALL queue_tis_v27(:max_tis, NULL, :now, :pf)"]}


@pytest.fixture
def pg_only(eng):
    if db.dialect_dir(eng) != "postgresql":
        pytest.skip("PostgreSQL's own checks (its entries rely on transaction ids)")
    return eng


@pytest.fixture
def sk(eng):
    """Either dialect: PostgreSQL's skip entries are queue_tis_v11's (called here through v27, which
    calls v25, which calls v23, which has them as they are), MySQL/MariaDB's v18's (through v27,
    which calls v26, which has v24's text, which has v19's)."""
    return eng


def call_skip(eng, max_tis: int, pf: int = 2, skip_min: int = 1, outcome: dict | None = None) -> list[int]:
    """The version with skip entries of the engine's dialect; the queued ids. With `outcome`, its
    session's id goes to outcome["pid"] first (for helpers.until_waiting_or_done)."""
    set_min, call = CALL[db.dialect_dir(eng)]
    with db.connect(eng) as c:
        if outcome is not None:
            outcome["pid"] = c.execute(sa.text(SESSION_ID[db.dialect_dir(eng)])).scalar()
        c.execute(sa.text(set_min), {"skip_min": skip_min})
        return [r.ti_id for r in c.execute(sa.text(call), {"max_tis": max_tis, "now": T0, "pf": pf}).all()]


def entries(eng) -> dict:
    """pool -> (bound id, min_wide, sorted partitions)."""
    with eng.connect() as c:
        parts = c.execute(sa.text("SELECT pool, kind, dag_run_id, dag_id, task_id, executor FROM queue_skip_part")).all()
        return {r.pool: (r.b_id, r.min_wide, sorted(tuple(str(x) for x in p[1:]) for p in parts if p.pool == r.pool))
                for r in c.execute(sa.text("SELECT pool, b_id, min_wide FROM queue_skip"))}


@st.composite
def refused_heads(draw):
    """Small pools, a run at its max_active_tasks, a task at its max_active_tis_per_dag, wide TIs:
    the first TIs of a pool in queue order are often refused, the ones behind them not."""
    pools = {"p0": (draw(st.integers(1, 6)), False), "p1": (draw(st.sampled_from([-1, 2, 3, 8])), False),
             "default_pool": (128, False)}
    dags = {"d0": (draw(st.sampled_from([1, 2, None])), False), "d1": (None, False)}
    tasks = {(d, t): (draw(st.sampled_from([None, 1, 2])), draw(st.sampled_from([None, None, 1])))
             for d in dags for t in ("a", "b")}
    runs = {1: ("d0", "running", 0), 2: ("d1", "running", 1), 3: ("d0", "running", 2)}
    tis = []
    for i in range(draw(st.integers(4, 40))):
        run = draw(st.sampled_from(sorted(runs)))
        tis.append(TI(id=i + 1, dag_id=runs[run][0], run=run, task_id=draw(st.sampled_from(["a", "b"])),
                      map_index=i, state=draw(st.sampled_from(["scheduled"] * 6 + ["running", "queued"])),
                      priority_weight=draw(st.integers(1, 5)), pool=draw(st.sampled_from(["p0", "p0", "p1"])),
                      pool_slots=draw(st.sampled_from([1, 1, 1, 2, 7]))))
    return World(pools, {"default": draw(st.sampled_from([None, None, 4])), "other": None}, dags, tasks, runs, tis)


def _event(eng, w: World, data, next_id: int) -> int:
    """One random change, made in the database and in the model; the next free TI id."""
    by_state = lambda *states: [t for t in w.tis if t.state in states]  # noqa: E731
    kind = data.draw(st.sampled_from(["finish", "requeue", "new", "pool", "dag", "task", "priority", "pause"]))
    with eng.begin() as c:
        if kind == "finish" and by_state("queued", "running"):
            t = data.draw(st.sampled_from(by_state("queued", "running")))
            t.state = "success"
            c.execute(sa.text("UPDATE task_instance SET state = 'success' WHERE id = :id"), {"id": t.id})
        elif kind == "requeue" and by_state("queued"):
            t = data.draw(st.sampled_from(by_state("queued")))
            t.state = "scheduled"
            c.execute(sa.text("UPDATE task_instance SET state = 'scheduled' WHERE id = :id"), {"id": t.id})
        elif kind == "new":
            run = data.draw(st.sampled_from(sorted(w.runs)))
            t = TI(id=next_id, dag_id=w.runs[run][0], run=run, task_id=data.draw(st.sampled_from(["a", "b"])),
                   map_index=next_id, state="scheduled", priority_weight=data.draw(st.integers(1, 6)),
                   pool=data.draw(st.sampled_from(["p0", "p1"])), pool_slots=data.draw(st.sampled_from([1, 1, 2])))
            w.tis.append(t)
            next_id += 1
            c.execute(sa.text(
                "INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, "
                "pool, pool_slots, queue, executor, run_after) VALUES (:id, :run, :d, :rid, :t, :m, 'scheduled', :pw, "
                ":pool, :ps, 'default', 'default', :ra)"),
                {"id": t.id, "run": run, "d": t.dag_id, "rid": f"run{run}", "t": t.task_id, "m": t.map_index,
                 "pw": t.priority_weight, "pool": t.pool, "ps": t.pool_slots,
                 "ra": T0 + timedelta(minutes=w.runs[run][2])})
        elif kind == "pool":
            name = data.draw(st.sampled_from(["p0", "p1"]))
            w.pools[name] = (data.draw(st.sampled_from([-1, 1, 2, 4, 8])), False)
            c.execute(sa.text("UPDATE pool SET slots = :s WHERE name = :n"), {"s": w.pools[name][0], "n": name})
        elif kind == "dag":
            w.dags["d0"] = (data.draw(st.sampled_from([1, 2, 3, None])), w.dags["d0"][1])
            c.execute(sa.text("UPDATE dag SET max_active_tasks = :m WHERE dag_id = 'd0'"), {"m": w.dags["d0"][0]})
        elif kind == "task":
            key = data.draw(st.sampled_from(sorted(w.tasks)))
            w.tasks[key] = (data.draw(st.sampled_from([None, 1, 2, 3])), w.tasks[key][1])
            c.execute(sa.text("UPDATE task SET max_active_tis_per_dag = :m WHERE dag_id = :d AND task_id = :t"),
                      {"m": w.tasks[key][0], "d": key[0], "t": key[1]})
        elif kind == "priority" and by_state("scheduled"):
            t = data.draw(st.sampled_from(by_state("scheduled")))
            t.priority_weight = data.draw(st.integers(1, 6))
            c.execute(sa.text("UPDATE task_instance SET priority_weight = :pw WHERE id = :id"),
                      {"pw": t.priority_weight, "id": t.id})
        elif kind == "pause":
            d = data.draw(st.sampled_from(["d0", "d1"]))
            w.dags[d] = (w.dags[d][0], not w.dags[d][1])
            c.execute(sa.text("UPDATE dag SET is_paused = :p WHERE dag_id = :d"), {"p": w.dags[d][1], "d": d})
    return next_id


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_skip_entries_keep_the_greedy_answer_through_changes(sk, data):
    w = data.draw(refused_heads(), label="world")
    load_world(sk, w)
    next_id = len(w.tis) + 1
    for _ in range(6):
        max_tis = data.draw(st.integers(1, 6))
        expected = greedy_v4(w, max_tis, 0, 0, 0, 0)
        before = _usage(sk)
        got = call_skip(sk, max_tis, pf=data.draw(st.sampled_from([0, 2])), skip_min=data.draw(st.sampled_from([1, 1, 3])))
        assert sorted(got) == sorted(expected)
        for part, (cap, used) in _usage(sk).items():
            assert used <= max(cap, before.get(part, (cap, 0))[1]), part
        by_id = {t.id: t for t in w.tis}
        for i in got:
            by_id[i].state = "queued"
        for _ in range(data.draw(st.integers(0, 3))):
            next_id = _event(sk, w, data, next_id)


def _blocked_head(sk, n_blocked: int = 40, n_behind: int = 5) -> World:
    """Pool p (4 slots): n_blocked TIs of run 1 (DAG a, max_active_tasks 1, one TI running in
    pool q) at priority 9, then n_behind TIs of run 2 (DAG b, no limit) at priority 1."""
    tis = [TI(1, "a", 1, "t", 0, "running", 9, "q", 1)]
    tis += [TI(i, "a", 1, "t", i, "scheduled", 9, "p", 1) for i in range(2, 2 + n_blocked)]
    tis += [TI(100 + i, "b", 2, "t", i, "scheduled", 1, "p", 1) for i in range(n_behind)]
    w = World(pools={"default_pool": (128, False), "p": (4, False), "q": (4, False)}, parallelism={"default": None},
              dags={"a": (1, False), "b": (None, False)}, tasks={("a", "t"): (None, None), ("b", "t"): (None, None)},
              runs={1: ("a", "running", 0), 2: ("b", "running", 0)}, tis=tis)
    load_world(sk, w)
    return w


# A writer that makes TI 104 scheduled ahead of everyone (priority 10), from `none`, as
# schedule_tis writes TIs: _unschedule_104 first. (Changing the priority of a TI that is scheduled
# already would wait for the queue lock instead: trigger guard_scheduled, tests/test_hand_edits.py.)
WRITE_104 = "UPDATE task_instance SET state = 'scheduled', priority_weight = 10 WHERE id = 104"


def _unschedule_104(sk) -> None:
    with sk.begin() as c:
        c.execute(sa.text("UPDATE task_instance SET state = 'none' WHERE id = 104"))


def test_an_entry_is_made_for_a_refused_head_and_dropped_when_its_run_gets_room(sk):
    _blocked_head(sk)
    assert sorted(call_skip(sk, 2, skip_min=32)) == [100, 101]
    assert entries(sk) == {"p": (41, None, [("run", "1", "None", "None", "None")])}
    with sk.begin() as c:   # back to scheduled: read again, past the entry
        c.execute(sa.text("UPDATE task_instance SET state = 'scheduled' WHERE id IN (100, 101)"))
    assert sorted(call_skip(sk, 2, skip_min=32)) == [100, 101]
    assert list(entries(sk)) == ["p"]
    with sk.begin() as c:   # run 1's running TI ends: its first scheduled TI comes first
        c.execute(sa.text("UPDATE task_instance SET state = 'success' WHERE id = 1"))
    assert sorted(call_skip(sk, 2, skip_min=32)) == [2, 102]
    assert entries(sk) == {}             # run 1 had room when the page was read: nothing refused
    with sk.begin() as c:
        c.execute(sa.text("UPDATE task_instance SET state = 'success' WHERE id IN (100, 101, 102)"))
    assert sorted(call_skip(sk, 2, skip_min=32)) == [103, 104]
    assert entries(sk) == {"p": (41, None, [("run", "1", "None", "None", "None")])}  # made again


def test_an_entry_ends_before_the_first_ti_the_page_takes_even_one_pruned_later(sk):
    """TIs 2-11 refused (run 1 full), TI 50 of a paused DAG (the page takes it, the prune drops
    it), TIs 12-41 refused again, runnable TIs behind: the entry's bound is TI 11, not 41, so TI
    50 is read again and queued once its DAG is unpaused."""
    tis = [TI(1, "a", 1, "t", 0, "running", 9, "q", 1)]
    tis += [TI(i, "a", 1, "t", i, "scheduled", 9, "p", 1) for i in range(2, 12)]
    tis += [TI(50, "c", 3, "t", 50, "scheduled", 8, "p", 1)]
    tis += [TI(i, "a", 1, "t", i, "scheduled", 7, "p", 1) for i in range(12, 42)]
    tis += [TI(100 + i, "b", 2, "t", i, "scheduled", 1, "p", 1) for i in range(5)]
    load_world(sk, World(pools={"default_pool": (128, False), "p": (4, False), "q": (4, False)},
                         parallelism={"default": None}, dags={"a": (1, False), "b": (None, False), "c": (None, True)},
                         tasks={("a", "t"): (None, None), ("b", "t"): (None, None), ("c", "t"): (None, None)},
                         runs={1: ("a", "running", 0), 2: ("b", "running", 0), 3: ("c", "running", 0)}, tis=tis))
    assert sorted(call_skip(sk, 2)) == [100, 101]
    assert entries(sk)["p"][0] == 11
    with sk.begin() as c:
        c.execute(sa.text("UPDATE dag SET is_paused = :f WHERE dag_id = 'c'"), {"f": False})
    assert call_skip(sk, 1) == [50]


def test_fewer_refused_tis_than_skip_min_make_no_entry(sk):
    _blocked_head(sk, n_blocked=31)
    assert sorted(call_skip(sk, 2, skip_min=32)) == [100, 101]
    assert entries(sk) == {}


@pytest.mark.parametrize("n_behind", [5, 0], ids=["runnable-behind", "page-empty"])
@pytest.mark.parametrize("skip_min", [32, 33])
def test_a_head_of_exactly_skip_min_refused_tis_makes_an_entry(sk, n_behind, skip_min):
    """PostgreSQL's v22 (and v23, called here through v27 and v25) first looks for the skip_min-th TI ahead of the page's first row (ahead of
    the pool's end, when the page is empty) and reads the head's reasons only where it exists:
    32 refused TIs make an entry at skip_min 32, none at 33."""
    _blocked_head(sk, n_blocked=32, n_behind=n_behind)
    assert sorted(call_skip(sk, 2, skip_min=skip_min)) == [100, 101][:n_behind]
    made = {"p": (33, None, [("run", "1", "None", "None", "None")])} if skip_min == 32 else {}
    assert entries(sk) == made
    assert sorted(call_skip(sk, 2, skip_min=skip_min)) == [102, 103][:n_behind]
    assert entries(sk) == made


def test_a_ti_written_ahead_of_the_bound_is_read(sk):
    """After the entry: a new TI ahead of the bound, and a TI past it moved ahead by its priority."""
    _blocked_head(sk)
    call_skip(sk, 1)
    assert list(entries(sk)) == ["p"]
    with sk.begin() as c:
        c.execute(sa.text("UPDATE task_instance SET state = 'scheduled' WHERE id = 100"))
        c.execute(sa.text("INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, "
                          "priority_weight, pool, pool_slots, queue, executor, run_after) "
                          "VALUES (200, 2, 'b', 'run2', 't', 200, 'scheduled', 20, 'p', 1, 'default', 'default', :t)"),
                  {"t": T0})
        c.execute(sa.text("UPDATE task_instance SET priority_weight = 10 WHERE id = 104"))
    assert call_skip(sk, 2) == [200, 104]


def test_a_ti_written_by_a_transaction_open_during_the_call_is_read_by_the_next(sk):
    """A writer scheduled TI 104 ahead of the bound (priority 10) and had not committed when a call
    extended the entry (new refused TIs past its bound): the entry's xmin is the call's snapshot's,
    which the open writer holds back, so the next call still finds 104."""
    _blocked_head(sk)
    call_skip(sk, 1)
    bound = entries(sk)["p"][0]
    with sk.begin() as c:
        c.execute(sa.text("UPDATE task_instance SET state = 'running' WHERE id = 104"))
    writer = sk.connect()
    tx = writer.begin()
    writer.execute(sa.text("UPDATE task_instance SET state = 'scheduled', priority_weight = 10 WHERE id = 104"))
    try:
        with sk.begin() as c:   # more refused TIs of run 1 behind the others: the next call extends the entry
            c.execute(sa.text("INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, "
                              "priority_weight, pool, pool_slots, queue, executor, run_after) "
                              "VALUES (:id, 1, 'a', 'run1', 't', :id, 'scheduled', 9, 'p', 1, 'default', 'default', :t)"),
                      [{"id": 300 + g, "t": T0} for g in range(5)])
        assert call_skip(sk, 1) == [101]
        assert entries(sk)["p"][0] == 304 != bound
    finally:
        tx.commit()
        writer.close()
    assert call_skip(sk, 1) == [104]


def test_no_entry_hides_a_ti_whose_writer_was_open_when_it_would_have_been_made(sk):
    """A writer made TI 104 scheduled ahead of the refused head (priority 10) and had not committed when a
    call found 40 refused TIs to make an entry of. PostgreSQL makes it (its xmin is held back by
    the open writer); MySQL/MariaDB makes none while the writer holds the pool's gate row. Either
    way the next call, after the commit, queues 104 first."""
    _blocked_head(sk)
    _unschedule_104(sk)
    writer = sk.connect()
    tx = writer.begin()
    writer.execute(sa.text(WRITE_104))
    try:
        assert call_skip(sk, 1, skip_min=32) == [100]
        assert list(entries(sk)) == (["p"] if db.dialect_dir(sk) == "postgresql" else [])
    finally:
        tx.commit()
        writer.close()
    assert call_skip(sk, 1, skip_min=32) == [104]
    assert call_skip(sk, 1, skip_min=32) == [101]
    assert list(entries(sk)) == ["p"]   # (made now on MySQL/MariaDB: no writer open)


# Refused TIs of run 1 (priority 9, ids from 1,000 on) that make the re-read of a refused head (step
# 1') last long enough to be seen from another session.
MANY_REFUSED = {
    "postgresql": "INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, "
                  "pool, pool_slots, queue, executor, run_after) SELECT 1000 + g, 1, 'a', 'run1', 't', 1000 + g, "
                  "'scheduled', 9, 'p', 1, 'default', 'default', :t FROM generate_series(0, :n - 1) g",
    "mysql": "INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, "
             "pool, pool_slots, queue, executor, run_after) SELECT 999 + g.i, 1, 'a', 'run1', 't', 999 + g.i, "
             "'scheduled', 9, 'p', 1, 'default', 'default', :t "
             "FROM JSON_TABLE(CONCAT('[', REPEAT('0,', :n - 1), '0]'), '$[*]' COLUMNS (i FOR ORDINALITY)) g"}
IN_REFUSED_HEAD_READ = {  # the statement of step 1', as the server shows it while it runs
    "postgresql": "SELECT count(*) FROM pg_stat_activity WHERE pid = :pid AND query LIKE '%queue_tis_v%'",
    "mysql": "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = :pid AND INFO LIKE '%_reg (why%'"}


def test_a_writer_that_commits_while_the_call_reads_the_refused_head_is_not_hidden(sk):
    """A writer made TI 104 scheduled ahead of the refused head (priority 10) and commits while a call is
    re-reading that head to make an entry of it (MySQL/MariaDB: step 1', seen in PROCESSLIST; the
    call's page read missed 104), or, on PostgreSQL, whose server shows only the outer statement,
    at some moment of the call. The entry must not cover 104: PostgreSQL's covers TIs of
    transactions its snapshot saw committed only; MySQL/MariaDB's gate is taken before the
    re-read (taken after it, as queue_tis_v15-v17 did, the gate was free again by then, and the
    entry hid 104, which had no log row: fails with v17). So the next call queues 104 first."""
    _blocked_head(sk)
    dialect = db.dialect_dir(sk)
    with sk.begin() as c:
        c.execute(sa.text(MANY_REFUSED[dialect]), {"n": 30000, "t": T0})
    _unschedule_104(sk)
    writer = sk.connect()
    tx = writer.begin()
    writer.execute(sa.text(WRITE_104))
    outcome = {}

    def call():
        outcome["ids"] = call_skip(sk, 1, skip_min=32, outcome=outcome)

    caller = threading.Thread(target=call)
    caller.start()
    try:
        # Commit while the call re-reads the refused head, or once it is done if it never does.
        with sk.connect() as c:
            deadline = time.monotonic() + 60
            while caller.is_alive():
                pid = outcome.get("pid")
                if pid is not None and c.execute(sa.text(IN_REFUSED_HEAD_READ[dialect]), {"pid": pid}).scalar():
                    break
                assert time.monotonic() < deadline
                c.rollback()
                time.sleep(0.002)
        tx.commit()
    finally:
        writer.close()
        caller.join(120)
    assert not caller.is_alive(), outcome
    # (PostgreSQL: the commit may land before the call's snapshot, which then sees 104 first.)
    first = outcome["ids"]
    assert first == [100] or (dialect == "postgresql" and first == [104]), outcome
    assert call_skip(sk, 1, skip_min=32) == ([104] if first == [100] else [100])
    assert call_skip(sk, 1, skip_min=32) == [101]


def test_an_entry_of_wide_tis_holds_while_the_pool_has_fewer_free_slots(sk):
    """Pool p (4 slots, 1 running): 40 TIs of 4 slots ahead of narrow ones. When the running TI
    ends, the first wide TI fits: the entry (min_wide 4) no longer holds."""
    tis = [TI(1, "a", 1, "t", 0, "running", 1, "p", 1)]
    tis += [TI(i, "a", 1, "t", i, "scheduled", 9, "p", 4) for i in range(2, 42)]
    tis += [TI(100 + i, "a", 1, "t", 100 + i, "scheduled", 1, "p", 1) for i in range(5)]
    load_world(sk, World(pools={"default_pool": (128, False), "p": (4, False)}, parallelism={"default": None},
                         dags={"a": (None, False)}, tasks={("a", "t"): (None, None)}, runs={1: ("a", "running", 0)},
                         tis=tis))
    assert sorted(call_skip(sk, 1)) == [100]
    assert entries(sk) == {"p": (41, 4, [])}
    with sk.begin() as c:
        c.execute(sa.text("UPDATE task_instance SET state = 'success' WHERE id IN (1, 100)"))
    assert call_skip(sk, 2) == [2]


@pytest.mark.parametrize("version", [12, 13, 14])
def test_a_skip_min_that_is_not_a_whole_number_warns_and_queues(pg_only, version):
    """`ALTER DATABASE ... SET engine.skip_min = '3O'` (a typo): queue_tis_v11 fails at every call
    on its cast; v12, v13 and v14 (the named query's) clear the value for the call with a WARNING
    naming the setting and the fix, and queue as with the default."""
    _blocked_head(pg_only)
    with pg_only.begin() as c:
        c.execute(sa.text("DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET engine.skip_min = %L', "
                          "current_database(), '3O'); END $$"))
    pg_only.dispose()   # (new sessions take the database's setting)
    with pytest.raises(sa.exc.DBAPIError, match="invalid input syntax for type integer"):
        with db.connect(pg_only) as c:
            c.execute(sa.text("SELECT * FROM queue_tis_v11(2)")).all()
    raw = pg_only.raw_connection()
    try:
        warnings = []
        raw.driver_connection.add_notice_handler(lambda d: warnings.append(d.message_primary))
        cur = raw.cursor()
        cur.execute(f"SELECT ti_id FROM queue_tis_v{version}(2)")
        assert sorted(r[0] for r in cur.fetchall()) == [100, 101]
        raw.commit()
    finally:
        raw.close()
    assert len(warnings) == 1 and "engine.skip_min = '3O' is not a whole number" in warnings[0]
    assert "RESET engine.skip_min" in warnings[0]


def test_transaction_ids_from_another_cluster_drop_the_entries(pg_only):
    """A dump restored into another cluster brings seen_xmin and sched_xid values that the new
    cluster's transaction ids may lie below: a TI written there ahead of a bound looks covered
    (v11 misses it). The named query's version (v14, as v13) sees ids past the current snapshot's xmax,
    drops the entries, stamps those TIs again, and v11 then reads the pool in full."""
    _blocked_head(pg_only)
    assert call_skip(pg_only, 1) == [100]
    assert list(entries(pg_only)) == ["p"]
    with pg_only.begin() as c:
        c.execute(sa.text("UPDATE task_instance SET state = 'scheduled' WHERE id = 100"))
        c.execute(sa.text("UPDATE queue_skip SET seen_xmin = seen_xmin + 1000000000"))   # "restored"
        c.execute(sa.text("ALTER TABLE task_instance DISABLE TRIGGER stamp_scheduled"))
        c.execute(sa.text("UPDATE task_instance SET sched_xid = sched_xid + 1000000000 WHERE id = 101"))
        c.execute(sa.text("ALTER TABLE task_instance ENABLE TRIGGER stamp_scheduled"))
        # Written in the new cluster, ahead of the bound: below the restored seen_xmin.
        c.execute(sa.text("INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, "
                          "priority_weight, pool, pool_slots, queue, executor, run_after) "
                          "VALUES (200, 2, 'b', 'run2', 't', 200, 'scheduled', 20, 'p', 1, 'default', 'default', :t)"),
                  {"t": T0})
    with db.connect(pg_only) as c:   # v11 alone: TI 200 goes unseen (the hazard), rolled back
        assert 200 not in [r.ti_id for r in c.execute(sa.text("SELECT * FROM queue_tis_v11(1)")).all()]
        c.rollback()
    assert queue(pg_only, 1) == [200]   # the named query
    with pg_only.connect() as c:
        assert c.execute(sa.text("SELECT sched_xid < (SELECT min(seen_xmin) FROM queue_skip) OR NOT EXISTS "
                                 "(SELECT 1 FROM queue_skip) FROM task_instance WHERE id = 101")).scalar()
        assert c.execute(sa.text("SELECT count(*) FROM task_instance WHERE state = 'scheduled' AND sched_xid >= "
                                 "pg_snapshot_xmax(pg_current_snapshot())::text::bigint")).scalar() == 0


def until_a_lock_wait(sk, thread, outcome) -> None:
    """MySQL/MariaDB: until the session outcome["pid"] (`thread`'s) waits for a lock; fails if
    `thread` ends first. Its own session only (helpers.until_waiting_or_done): INNODB_TRX lists the
    whole server's transactions, and a test of another worker waiting for a lock in its own
    database had made a server-wide count return before `thread` waited."""
    assert until_waiting_or_done(sk, thread, outcome, "pid"), outcome


def test_a_writer_and_the_call_making_an_entry_deadlock_and_one_retry_loses_nothing(sk):
    """MySQL/MariaDB: a call that makes an entry holds its pool's gate row exclusively until it
    commits, and its final UPDATE locks the TIs it queues; a writer that holds one of those TIs
    (a locking read, as an operator's command takes) and then writes a scheduled TI of that pool
    waits for the gate. Each waits for the other: InnoDB breaks the cycle with error 1213 on one
    side (services treat it as transient and retry next pass). Whichever side it picked, one retry
    of it leaves the greedy answer whole: 100 queued once, and 104 (made scheduled ahead of the entry's
    bound by the writer) found by the next call."""
    if db.dialect_dir(sk) != "mysql":
        pytest.skip("the gate row is MySQL/MariaDB's (PostgreSQL's entries take no lock of writers)")
    _blocked_head(sk)
    _unschedule_104(sk)
    writer = sk.connect()
    tx = writer.begin()
    writer.execute(sa.text("SELECT id FROM task_instance WHERE id = 100 FOR UPDATE")).all()
    outcome = {}

    def call():
        try:
            outcome["ids"] = call_skip(sk, 1, skip_min=32, outcome=outcome)
        except sa.exc.DBAPIError as exc:
            outcome["error"] = db.error_code(exc)

    caller = threading.Thread(target=call)
    caller.start()
    try:
        # The call waits for TI 100 once it holds the gate and made the entry (its final UPDATE).
        until_a_lock_wait(sk, caller, outcome)
        writer_error = None
        try:
            writer.execute(sa.text(WRITE_104))
            tx.commit()
        except sa.exc.DBAPIError as exc:
            writer_error = db.error_code(exc)
            tx.rollback()
    finally:
        caller.join(120)
        writer.close()
    assert not caller.is_alive()
    # Exactly one side was chosen to break the deadlock.
    assert [writer_error, outcome.get("error")].count(1213) == 1, (writer_error, outcome)
    assert [writer_error, outcome.get("error")].count(None) == 1, (writer_error, outcome)
    if writer_error is not None:   # the writer retries; the call had queued 100 and made the entry
        assert outcome["ids"] == [100] and list(entries(sk)) == ["p"]
        with sk.begin() as c:
            c.execute(sa.text(WRITE_104))
    else:                          # the call rolled back whole: nothing queued, no entry
        assert list(entries(sk)) == []
        assert call_skip(sk, 1, skip_min=32) == [104]   # the writer's TI, now ahead of everyone
        assert call_skip(sk, 1, skip_min=32) == [100]
        return
    assert call_skip(sk, 1, skip_min=32) == [104]
    assert call_skip(sk, 1, skip_min=32) == [101]
    with sk.connect() as c:
        assert c.execute(sa.text("SELECT COUNT(*) FROM task_instance WHERE state = 'queued'")).scalar() == 3


def test_a_writer_whose_statement_read_before_it_waited_for_the_gate_logs_its_ti(sk):
    """MySQL/MariaDB: a writer's statement that read a table before it wrote a scheduled TI (a
    subquery: InnoDB opens the statement's read view there) waits for the gate of a call making
    an entry; once the call commits, the trigger must see the new entry and log the TI."""
    if db.dialect_dir(sk) != "mysql":
        pytest.skip("the gate row is MySQL/MariaDB's")
    _blocked_head(sk)
    _unschedule_104(sk)
    caller = sk.connect()
    ctx = caller.begin()
    caller.execute(sa.text("SET @engine_skip_min = 32"))
    assert [r.ti_id for r in caller.execute(sa.text("CALL queue_tis_v18(1, NULL, :now, 2)"), {"now": T0})] == [100]
    outcome = {}

    def write():
        with sk.connect() as c:
            outcome["pid"] = c.execute(sa.text(SESSION_ID["mysql"])).scalar()
            c.commit()   # (the write below is a transaction of its own, as before)
            c.execute(sa.text("UPDATE task_instance SET state = 'scheduled', priority_weight = 10 WHERE id = "
                              "(SELECT id FROM (SELECT max(id) AS id FROM task_instance WHERE id = 104) x)"))
            c.commit()
        outcome["done"] = True

    writer = threading.Thread(target=write)
    writer.start()
    try:
        until_a_lock_wait(sk, writer, outcome)   # (the writer waits for the gate)
        ctx.commit()
    finally:
        caller.close()
        writer.join(60)
    assert outcome.get("done") is True, outcome
    assert list(entries(sk)) == ["p"]
    assert call_skip(sk, 1, skip_min=32) == [104]


def _flag(eng) -> bool:
    with eng.connect() as c:
        return bool(c.execute(sa.text("SELECT has_entry FROM queue_skip_gate WHERE pool = 'p'")).scalar())


def _log(eng) -> list[int]:
    with eng.connect() as c:
        return sorted(c.execute(sa.text("SELECT ti_id FROM queue_skip_log")).scalars())


def test_the_gate_flag_is_set_with_every_entry_and_cleared_when_the_gate_is_free(sk):
    """MySQL/MariaDB: queue_skip_gate.has_entry, what writers read (stamp_scheduled_v2), is set
    when an entry is made and cleared when it is dropped, unless a writer holds the gate then: it
    stays set (never unset while an entry exists), writers log their TIs until the pool's next
    entry is dropped, and each call deletes those log rows."""
    if db.dialect_dir(sk) != "mysql":
        pytest.skip("the gate row is MySQL/MariaDB's")
    _blocked_head(sk)

    def finish(*ids):
        with sk.begin() as c:
            c.execute(sa.text("UPDATE task_instance SET state = 'success' WHERE id IN :ids").bindparams(
                sa.bindparam("ids", expanding=True)), {"ids": list(ids)})

    assert call_skip(sk, 1, skip_min=32) == [100]
    assert list(entries(sk)) == ["p"] and _flag(sk)
    finish(1)                                         # run 1 gets room: the entry is dropped
    assert call_skip(sk, 1, skip_min=32) == [2]
    assert entries(sk) == {} and not _flag(sk)
    assert call_skip(sk, 1, skip_min=32) == [101]     # run 1 full again (2 queued): made again
    assert list(entries(sk)) == ["p"] and _flag(sk)
    writer = sk.connect()                             # a writer of pool p holds its gate
    tx = writer.begin()
    writer.execute(sa.text("INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, "
                           "priority_weight, pool, pool_slots, queue, executor, run_after) VALUES (200, 2, 'b', "
                           "'run2', 't', 200, 'scheduled', 1, 'p', 1, 'default', 'default', :t)"), {"t": T0})
    try:
        finish(2)
        assert call_skip(sk, 1, skip_min=32) == [3]   # dropped, but the gate is held: still set
        assert entries(sk) == {} and _flag(sk)
    finally:
        tx.commit()
        writer.close()
    with sk.begin() as c:                             # written with no entry: logged all the same
        c.execute(sa.text("UPDATE task_instance SET priority_weight = 2 WHERE id = 104"))
    assert _log(sk) == [104, 200]
    assert call_skip(sk, 1, skip_min=32) == [104]     # run 1 full (3 queued): made again
    assert _log(sk) == [] and list(entries(sk)) == ["p"] and _flag(sk)
    finish(3)
    assert call_skip(sk, 1, skip_min=32) == [4]       # dropped with the gate free: cleared
    assert entries(sk) == {} and not _flag(sk)


def test_mysql_v26_deletes_log_rows_without_waiting_for_an_open_writers_log_row(sk):
    """MySQL/MariaDB: a call reads the committed queue_skip_log rows and deletes those it no longer
    needs. A writer that made a TI scheduled in a pool with an entry and has not committed holds a
    log row of its own (stamp_scheduled_v2); the call must not wait for it. v24 (v25) deletes with
    `DELETE l FROM queue_skip_log l JOIN qt24_arr a ...`, which MariaDB plans as a scan of the log
    with locking reads: pointed at v25 this fails with error 1205 after the 2 s it allows. v26
    drives the delete from its copy (STRAIGHT_JOIN); the named query's v27 calls v26 here."""
    if db.dialect_dir(sk) != "mysql":
        pytest.skip("MySQL/MariaDB's log (PostgreSQL's entries compare transaction ids)")
    _blocked_head(sk)
    _unschedule_104(sk)
    assert sorted(call_skip(sk, 2, skip_min=32)) == [100, 101]
    assert "p" in entries(sk)
    with sk.begin() as c:   # committed writes the log keeps: 100 and 101 scheduled again
        c.execute(sa.text("UPDATE task_instance SET state = 'scheduled' WHERE id IN (100, 101)"))
    with sk.connect() as c:
        assert c.execute(sa.text("SELECT COUNT(*) FROM queue_skip_log")).scalar() >= 2
    writer = sk.connect()
    tx = writer.begin()
    writer.execute(sa.text(WRITE_104))   # logged too, not committed
    try:
        set_min, call = CALL["mysql"]
        with db.connect(sk) as c:
            c.execute(sa.text("SET SESSION innodb_lock_wait_timeout = 2"))
            c.execute(sa.text(set_min), {"skip_min": 32})
            got = [r.ti_id for r in c.execute(sa.text(call), {"max_tis": 2, "now": T0, "pf": 2}).all()]
        assert sorted(got) == [100, 101]
    finally:
        tx.rollback()
        writer.close()
