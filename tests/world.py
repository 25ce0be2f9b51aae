"""Write a reference World into the database directly (fast enough for property tests).

Dialect-neutral SQL: the same statements run on PostgreSQL and MySQL/MariaDB."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from engine import db
from engine.scheduler import knobs_off, queue_knobs
from tests.reference import World

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
# Children first (foreign keys). DELETE, not TRUNCATE: MySQL's TRUNCATE is DDL (slow, and refused
# on a table another one references); every row below is inserted with an explicit id.
TABLES = ["pool_reservation", "task_instance_history", "task_instance", "dag_run", "task_dependency", "task", "dag", "pool", "executor"]


def reset(conn) -> None:
    for table in TABLES:
        conn.execute(sa.text(f"DELETE FROM {table}"))


def load_world(eng, w: World) -> None:
    with eng.begin() as c:
        reset(c)
        for name, limit in w.parallelism.items():
            c.execute(sa.text("INSERT INTO executor (name, parallelism) VALUES (:n, :p)"), {"n": name, "p": limit})
        for name, (slots, inc) in w.pools.items():
            c.execute(sa.text("INSERT INTO pool (name, slots, include_deferred) VALUES (:n, :s, :i)"),
                      {"n": name, "s": slots, "i": inc})
        for dag_id, (max_tasks, paused) in w.dags.items():
            c.execute(sa.text("INSERT INTO dag (dag_id, fileloc, max_active_tasks, is_paused, is_draining, is_active) "
                              "VALUES (:d, 'x', :m, :p, :dr, :a)"),
                      {"d": dag_id, "m": max_tasks, "p": paused, "dr": dag_id in w.draining,
                       "a": dag_id not in w.removed_dags})
        c.execute(sa.text("UPDATE deployment SET is_draining = :dr"), {"dr": w.drain_all})
        for (dag_id, task_id), (per_dag, per_run) in w.tasks.items():
            c.execute(sa.text("INSERT INTO task (dag_id, task_id, kind, bash_command, pool, max_active_tis_per_dag, "
                              "max_active_tis_per_dagrun, is_active) "
                              "VALUES (:d, :t, 'bash', 'true', 'default_pool', :a, :b, :act)"),
                      {"d": dag_id, "t": task_id, "a": per_dag, "b": per_run,
                       "act": (dag_id, task_id) not in w.removed_tasks})
        for run, (dag_id, state, run_after) in w.runs.items():
            c.execute(sa.text("INSERT INTO dag_run (id, dag_id, run_id, run_type, state, run_after, created_at) "
                              "VALUES (:id, :d, :r, 'manual', :s, :a, :a)"),
                      {"id": run, "d": dag_id, "r": f"run{run}", "s": state, "a": T0 + timedelta(minutes=run_after)})
        if w.tis:
            c.execute(sa.text(
                "INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, "
                "pool, pool_slots, queue, executor, run_after, next_method, updated_at) "
                "VALUES (:id, :run, :dag_id, :run_id, :task_id, :map_index, :state, :pw, :pool, :ps, 'default', :ex, "
                ":run_after, :nm, :upd)"),
                [{"id": t.id, "run": t.run, "dag_id": t.dag_id, "run_id": f"run{t.run}", "task_id": t.task_id,
                  "map_index": t.map_index, "state": t.state, "pw": t.priority_weight, "pool": t.pool,
                  "ps": t.pool_slots, "ex": t.executor, "run_after": T0 + timedelta(minutes=w.runs[t.run][2]),
                  "nm": "resume" if t.resuming else None,
                  "upd": None if t.since is None else T0 + timedelta(minutes=t.since)}
                 for t in w.tis])
        for r in w.reservations:
            c.execute(sa.text("INSERT INTO pool_reservation (ti_id, pool, slots, reason, since) "
                              "VALUES (:t, :p, :s, :r, :at)"),
                      {"t": r.ti_id, "p": r.pool, "s": r.slots, "r": r.reason, "at": T0 + timedelta(minutes=r.since)})


def load_one_run(eng, tis: list, pools: dict | None = None) -> None:
    """The smallest world: DAG 'd' with task 't', one running run (id 1), the executor 'default'
    unlimited, default_pool (128 slots) and `pools` (name -> (slots, include_deferred)); `tis`
    (reference TIs of run 1)."""
    load_world(eng, World(pools={"default_pool": (128, False), **(pools or {})}, parallelism={"default": None},
                          dags={"d": (None, False)}, tasks={("d", "t"): (None, None)}, runs={1: ("d", "running", 0)},
                          tis=tis))


def reservations(eng) -> list[tuple]:
    """pool_reservation as sorted (ti_id, pool, slots, reason) rows."""
    with eng.connect() as c:
        return sorted(tuple(r) for r in c.execute(sa.text("SELECT ti_id, pool, slots, reason FROM pool_reservation")))


# queue_tis by version, as a scheduler of that release calls it (the named query calls the newest).
QUEUE_CALL = {"postgresql": "SELECT * FROM queue_tis_v{v}(:max_tis, :job_id, :now)",
              "mysql": "CALL queue_tis_v{v}(:max_tis, :job_id, :now, 2)"}


def call_queue_tis(conn, version: int | None = None, **params):
    """queue_tis_v<version> (None: the named query) in the caller's transaction; the rows."""
    if version is None:
        knobs = queue_knobs()  # all off: the call alone, as the scheduler sends it
        return db.run(conn, "queue_tis", last_only=knobs_off(knobs), **{**knobs, **params}).all()
    return conn.execute(sa.text(QUEUE_CALL[db.dialect_dir(conn)].format(v=int(version))), params).all()


def queue(eng, max_tis: int, version: int | None = None) -> list[int]:
    with db.connect(eng) as c:
        rows = call_queue_tis(c, version, max_tis=max_tis, job_id=None, now=None)
    return [r.ti_id for r in rows]
