"""Skip entries against writers racing them (real processes, the real database).

Two schedulers call the named query (queue_tis_v27: on PostgreSQL v11's entries in v23's own walk,
which v27 calls through v25; on MySQL/MariaDB v18's in v24's text, which v26 has and v27 calls, as in v19, v15's kept by the gate row and the log) with entries made from a single refused
TI, a completer claims and finishes what they queue, and a writer keeps writing scheduled TIs:
new ones at every priority (ahead of bounds too), finished ones moved back to scheduled, new
priorities, some of its transactions held open across calls. When the race stops, in rounds
on a database nobody else writes, the named query and a version without entries (PostgreSQL v10,
MySQL/MariaDB v9), which reads every pool in full, must choose the same TIs (a TI only the latter
takes is one an entry hid); between rounds some TIs are queued and pools and the executor get more
room (the runs and tasks that entries rely on stay full). No limit may be exceeded at any step.
What this race does not show: two bugs seeded by hand in queue_tis_v15 (no gate taken; logged TIs
never read) passed it three times each, since entries churn here and each new one reads its pool
in full; tests/test_queue_skip.py catches both.
"""
from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from engine import db
from tests.race import T0, VIOLATIONS, Window, completer_loop, session_engine, setup_world, transient
from tests.world import call_queue_tis

ENTRY_FREE = {"postgresql": 10, "mysql": 9}   # the last version of each dialect without skip entries
SKIP_MIN = {"postgresql": "", "mysql": "SET @engine_skip_min = 1"}


def _engine(url: str):
    """Entries from a single refused TI (PostgreSQL: the database's setting, made by the test)."""
    return session_engine(url, SKIP_MIN.get(sa.engine.make_url(url).get_backend_name(), ""))


def scheduler(url: str, window: Window, seed: int, out) -> None:
    eng = _engine(url)
    rng = random.Random(seed)
    queued, entries, violations = [], 0, []   # (a TI moved back to scheduled may be queued again)
    while window.racing():
        try:
            with eng.begin() as c:
                queued += [r.ti_id for r in call_queue_tis(c, None, max_tis=rng.randint(1, 8), job_id=seed, now=None)]
        except sa.exc.DBAPIError as exc:
            if not transient(exc):
                raise
        with eng.connect() as c:
            entries = max(entries, c.execute(sa.text("SELECT count(*) FROM queue_skip")).scalar())
            violations += [tuple(r) for r in c.execute(VIOLATIONS)]
    eng.dispose()
    out.put({"queued": queued, "entries": entries, "violations": violations})


def writer(url: str, window: Window, seed: int, out) -> None:
    """Writes TIs scheduled in every way a deployment does, now and then holding its transaction
    open for a while (across scheduler calls)."""
    eng = db.make_engine(url)
    rng = random.Random(seed)
    written, next_map = 0, 10_000
    with eng.connect() as c:
        tasks = [tuple(r) for r in c.execute(sa.text("SELECT dag_id, task_id, pool FROM task"))]
        runs = {r.dag_id: [] for r in c.execute(sa.text("SELECT dag_id FROM dag"))}
        for r in c.execute(sa.text("SELECT id, dag_id, run_id FROM dag_run")):
            runs[r.dag_id].append((r.id, r.run_id))
    while window.racing():
        try:
            with eng.begin() as c:
                kind = rng.choice(["new", "new", "again", "priority"])
                if kind == "new":
                    dag_id, task_id, pool = rng.choice(tasks)
                    run, run_id = rng.choice(runs[dag_id])
                    next_map += 1
                    c.execute(sa.text(
                        "INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, "
                        "priority_weight, pool, pool_slots, queue, executor, run_after) VALUES (:run, :d, :r, :t, :m, "
                        "'scheduled', :pw, :pool, :ps, 'default', 'default', :a)"),
                        {"run": run, "d": dag_id, "r": run_id, "t": task_id, "m": next_map, "pw": rng.randint(1, 12),
                         "pool": pool, "ps": rng.choice([1, 1, 2]), "a": T0 + timedelta(seconds=rng.randint(0, 9))})
                elif kind == "again":
                    c.execute(sa.text("UPDATE task_instance SET state = 'scheduled', priority_weight = :pw "
                                      "WHERE id = (SELECT id FROM (SELECT min(id) AS id FROM task_instance "
                                      "WHERE state = 'success' AND id % 7 = :k) x)"),
                              {"pw": rng.randint(1, 12), "k": rng.randint(0, 6)})
                else:
                    c.execute(sa.text("UPDATE task_instance SET priority_weight = :pw "
                                      "WHERE id = (SELECT id FROM (SELECT max(id) AS id FROM task_instance "
                                      "WHERE state = 'scheduled' AND id % 5 = :k) x)"),
                              {"pw": rng.randint(1, 12), "k": rng.randint(0, 4)})
                if rng.random() < 0.2:
                    time.sleep(rng.uniform(0.01, 0.2))   # open across scheduler calls
            written += 1
        except sa.exc.DBAPIError as exc:
            if not transient(exc):
                raise
    eng.dispose()
    out.put({"written": written})


def test_no_ti_stays_hidden_behind_a_skip_entry_while_writers_race(eng, db_url):
    import multiprocessing as mp

    dialect = db.dialect_dir(eng)
    setup_world(eng, n_tis=3000)
    if dialect == "postgresql":
        with eng.begin() as c:   # every session's default: entries from a single refused TI
            c.execute(sa.text("DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET engine.skip_min = 1', "
                              "current_database()); END $$"))
    ctx = mp.get_context("spawn")
    out, window = ctx.Queue(), Window(ctx)
    procs = [ctx.Process(target=scheduler, args=(db_url, window, i + 1, out)) for i in range(2)]
    procs += [ctx.Process(target=completer_loop, args=(db_url, window, 100, out)),
              ctx.Process(target=writer, args=(db_url, window, 200, out))]
    results = window.run(db_url, procs, out, seconds=6,
                         enough="SELECT (SELECT count(*) FROM task_instance WHERE state = 'success') > 40")
    assert [p.exitcode for p in procs] == [0] * len(procs)
    assert sum(r.get("written", 0) for r in results) > 20
    assert max(r.get("entries", 0) for r in results) > 0   # entries were made and used
    assert [v for r in results for v in r.get("violations", [])] == []
    assert sum(len(r.get("queued", [])) for r in results) > 40
    # The race is over. In rounds, on a database nobody else writes: the named query (with its
    # entries) and a version that reads every pool in full must choose the same TIs; then some
    # are queued and some queued or running ones finish, which opens partitions and pools.
    rng = random.Random(7)
    after = _engine(db_url)
    try:
        for _ in range(8):
            chosen = {}
            for version in (None, ENTRY_FREE[dialect]):
                with db.connect(after) as c:
                    chosen[version] = sorted(r.ti_id for r in call_queue_tis(c, version, max_tis=512, job_id=None,
                                                                           now=None))
                    c.rollback()
            assert chosen[None] == chosen[ENTRY_FREE[dialect]]
            with after.begin() as c:   # (more slots: the runs and tasks entries rely on stay full)
                call_queue_tis(c, None, max_tis=rng.randint(1, 6), job_id=None, now=None)
                c.execute(sa.text("UPDATE pool SET slots = slots + :n WHERE name <> 'default_pool'"),
                          {"n": rng.randint(1, 3)})
                c.execute(sa.text("UPDATE executor SET parallelism = parallelism + :n"), {"n": rng.randint(2, 6)})
            with after.connect() as c:
                assert c.execute(VIOLATIONS).all() == []
    finally:
        after.dispose()


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
