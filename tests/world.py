"""Write a reference World into the database directly (fast enough for property tests)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from tests.reference import World

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
RESET = ("TRUNCATE task_instance, task_instance_history, dag_run, task_dependency, task, dag, pool, executor "
         "RESTART IDENTITY CASCADE")


def load_world(eng, w: World) -> None:
    with eng.begin() as c:
        c.execute(sa.text(RESET))
        for name, limit in w.parallelism.items():
            c.execute(sa.text("INSERT INTO executor (name, parallelism) VALUES (:n, :p)"), {"n": name, "p": limit})
        for name, (slots, inc) in w.pools.items():
            c.execute(sa.text("INSERT INTO pool (name, slots, include_deferred) VALUES (:n, :s, :i)"),
                      {"n": name, "s": slots, "i": inc})
        for dag_id, (max_tasks, paused) in w.dags.items():
            c.execute(sa.text("INSERT INTO dag (dag_id, fileloc, max_active_tasks, is_paused) VALUES (:d, 'x', :m, :p)"),
                      {"d": dag_id, "m": max_tasks, "p": paused})
        for (dag_id, task_id), (per_dag, per_run) in w.tasks.items():
            c.execute(sa.text("INSERT INTO task (dag_id, task_id, kind, bash_command, pool, max_active_tis_per_dag, "
                              "max_active_tis_per_dagrun) VALUES (:d, :t, 'bash', 'true', 'default_pool', :a, :b)"),
                      {"d": dag_id, "t": task_id, "a": per_dag, "b": per_run})
        for run, (dag_id, state, run_after) in w.runs.items():
            c.execute(sa.text("INSERT INTO dag_run (id, dag_id, run_id, run_type, state, run_after, created_at) "
                              "VALUES (:id, :d, :r, 'manual', :s, :a, :a)"),
                      {"id": run, "d": dag_id, "r": f"run{run}", "s": state, "a": T0 + timedelta(minutes=run_after)})
        if w.tis:
            c.execute(sa.text(
                "INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, "
                "pool, pool_slots, queue, executor, run_after) "
                "SELECT :id, :run, :dag_id, 'run' || CAST(:run AS text), :task_id, :map_index, :state, :pw, :pool, :ps, "
                "'default', :ex, r.run_after FROM dag_run r WHERE r.id = :run"),
                [{"id": t.id, "run": t.run, "dag_id": t.dag_id, "task_id": t.task_id, "map_index": t.map_index,
                  "state": t.state, "pw": t.priority_weight, "pool": t.pool, "ps": t.pool_slots, "ex": t.executor}
                 for t in w.tis])


def queue(eng, max_tis: int) -> list[int]:
    with eng.begin() as c:
        rows = c.execute(sa.text("SELECT ti_id FROM queue_tis_v1(:m, NULL, NULL)"), {"m": max_tis}).all()
    return [r.ti_id for r in rows]
