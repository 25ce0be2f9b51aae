"""Definitions changed at once: two `dags sync`s, or a sync and `pools set` / `pools delete`.
Each checks by plain reads and then writes; the lock of definitions (revision 0049, taken first
by each) makes the check and its writes one step. Every test holds the first one open just after
a check or a write (PauseAfter), starts the second, waits until it waits for a lock or ends, lets
the first commit, and asserts what must hold whatever the order. Before revision 0049 the second
ran through (or waited only at its write, after checking) and each of these ended wrong."""
from __future__ import annotations

import pytest

from engine import db
from engine.dagsync import sync
from engine.errors import EngineError
from engine.pools import delete_pool, set_pool
from tests.helpers import PauseAfter, run_named, sql, until_waiting_or_done


def dag_file(folder, name: str, dag_id: str, pool: str = "default_pool", slots: int = 1):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(
        "from engine import DAG, BashTask\n"
        f"with DAG({dag_id!r}):\n"
        f"    BashTask('t', bash_command='true', pool={pool!r}, pool_slots={slots})\n")


def race(eng, pause: PauseAfter, outcome: dict, first, second) -> bool:
    """first() in thread A until it reaches the pause; second() in thread B until it waits for a
    lock or ends; then A goes on. Whether B waited."""
    a = run_named("A", first, outcome)
    assert pause.reached.wait(60), outcome
    b = run_named("B", second, outcome)
    try:
        waited = until_waiting_or_done(eng, b, outcome, "B_pid")
    finally:
        pause.release()
        a.join(60)
        b.join(60)
    assert not isinstance(outcome.get("A"), Exception), outcome
    return waited


def test_two_syncs_of_one_new_dag_id_from_two_files_one_is_refused(eng, tmp_path, monkeypatch):
    """a.py and b.py both define DAG 'shared', new to the database. Sync of a.py wrote it, open;
    sync of b.py (no --force) must not take it over: it waits and is refused. (Before: its owner
    check did not see a.py's row, and its upsert moved the DAG to b.py.)"""
    folder = tmp_path / "dags"
    dag_file(folder, "a", "shared")
    dag_file(folder, "b", "shared")
    outcome = {}
    pause = PauseAfter(monkeypatch, outcome, "A", "upsert_dag")
    race(eng, pause, outcome, lambda: sync(eng, folder / "a.py", dags_folder=folder),
         lambda: sync(eng, folder / "b.py", dags_folder=folder))
    assert isinstance(outcome["B"], EngineError) and "is defined by a.py" in str(outcome["B"]), outcome
    assert sql(eng, "SELECT fileloc FROM dag WHERE dag_id = 'shared'") == [("a.py",)]


def test_a_sync_never_deactivates_a_dag_another_sync_just_moved_to_its_file(eng, tmp_path, monkeypatch):
    """DAG 'w' is stored from a.py. `dags sync other.py --force` moves it (written, open) while a.py
    is synced again without it: 'w' stays active, in other.py. (Before, on MySQL/MariaDB: the sync
    of a.py picked 'w' by its committed path, waited for its row, and deactivated it anyway.)"""
    folder = tmp_path / "dags"
    dag_file(folder, "a", "w")
    sync(eng, folder / "a.py", dags_folder=folder)
    dag_file(folder, "a", "x")
    dag_file(folder, "other", "w")
    outcome = {}
    pause = PauseAfter(monkeypatch, outcome, "A", "upsert_dag")
    race(eng, pause, outcome, lambda: sync(eng, folder / "other.py", dags_folder=folder, force=True),
         lambda: sync(eng, folder / "a.py", dags_folder=folder))
    assert not isinstance(outcome["B"], Exception), outcome
    assert outcome["B"]["deactivated"] == []
    assert sql(eng, "SELECT fileloc, is_active FROM dag WHERE dag_id = 'w'") == [("other.py", True)]


NOT_FITTING = ("SELECT count(*) FROM task t JOIN pool p ON p.name = t.pool "
               "WHERE t.is_active AND p.slots > 0 AND t.pool_slots > p.slots")


@pytest.mark.parametrize("first", ["sync", "pools set"])
def test_a_pool_shrunk_while_a_sync_adds_a_wide_task_never_leaves_the_task_wider(eng, tmp_path, monkeypatch,
                                                                                  first):
    """Pool p has 4 slots. A sync adds a task of width 3 in p while `pools set p 2` runs: whichever
    checked first, the other is refused, and no active task is wider than its pool. (Before: each
    checked by a plain read and both went through: a task of 3 in a pool of 2, its TIs never run.)"""
    folder = tmp_path / "dags"
    dag_file(folder, "a", "wide", pool="p", slots=3)
    with db.connect(eng) as conn:
        set_pool(conn, "p", 4)
    outcome = {}

    def shrink():
        with db.connect(eng) as conn:
            set_pool(conn, "p", 2)

    def add():
        return sync(eng, folder / "a.py", dags_folder=folder)
    if first == "sync":
        pause = PauseAfter(monkeypatch, outcome, "A", "check_task_targets")
        race(eng, pause, outcome, add, shrink)
        assert isinstance(outcome["B"], EngineError) and "fewer than task wide.t needs" in str(outcome["B"]), outcome
        assert sql(eng, "SELECT slots FROM pool WHERE name = 'p'") == [(4,)]
    else:
        pause = PauseAfter(monkeypatch, outcome, "A", "pool_widest_task")
        race(eng, pause, outcome, shrink, add)
        assert isinstance(outcome["B"], EngineError) and "more than pool 'p' has (2)" in str(outcome["B"]), outcome
        assert sql(eng, "SELECT count(*) FROM task WHERE dag_id = 'wide'") == [(0,)]
    assert sql(eng, NOT_FITTING) == [(0,)]


def test_a_pool_deleted_while_a_sync_adds_its_first_task_is_refused_in_one_line(eng, tmp_path, monkeypatch):
    """A sync adds the first task of pool p (written, open) while `pools delete p` runs: the delete
    waits and is refused with its own message. (Before: it found no user, and failed on the
    foreign key with the server's raw error once the sync committed.)"""
    folder = tmp_path / "dags"
    dag_file(folder, "a", "first_user", pool="p")
    with db.connect(eng) as conn:
        set_pool(conn, "p", 4)
    outcome = {}

    def delete():
        with db.connect(eng) as conn:
            delete_pool(conn, "p")
    pause = PauseAfter(monkeypatch, outcome, "A", "upsert_task")
    race(eng, pause, outcome, lambda: sync(eng, folder / "a.py", dags_folder=folder), delete)
    assert isinstance(outcome["B"], EngineError), outcome
    assert str(outcome["B"]) == "pool 'p' is used by task first_user.t; move its tasks to another pool first"
    assert sql(eng, "SELECT count(*) FROM pool WHERE name = 'p'") == [(1,)]


@pytest.mark.parametrize("query,column", [("dag_set_paused", "is_paused"), ("dag_set_draining", "is_draining")])
def test_pause_or_drain_reports_a_dag_only_in_the_state_asked_for(eng, tmp_path, query, column):
    """`engine dags pause|drain DAG` on an inactive DAG that a sync makes active between the named
    query's statements (MySQL/MariaDB: UPDATE, then the row read back): its UPDATE matched nothing,
    so the command must not report the DAG paused (draining). Before: the read-back saw the sync's
    commit and the command said 'paused' of a DAG whose runs kept starting."""
    if db.dialect_dir(eng) == "postgresql":
        pytest.skip("PostgreSQL's query is one UPDATE ... RETURNING: nothing runs between its statements")
    folder = tmp_path / "dags"
    dag_file(folder, "a", "back")
    sync(eng, folder / "a.py", dags_folder=folder)
    sql(eng, "UPDATE dag SET is_active = false, is_paused = false, is_draining = false WHERE dag_id = 'back'")
    params = {"dag_id": "back", column.removeprefix("is_"): True}
    with db.connect(eng) as conn:
        *before, last = db._statements("mysql", query, db._calls(conn))
        for stmt in before:
            conn.execute(stmt, params)
        sql(eng, "UPDATE dag SET is_active = true WHERE dag_id = 'back'")   # the sync, committed meanwhile
        reported = conn.execute(last, params).first()
    state = sql(eng, f"SELECT {column} FROM dag WHERE dag_id = 'back'")
    assert state == [(False,)]
    assert reported is None, "reported as done although the DAG is not in that state"
