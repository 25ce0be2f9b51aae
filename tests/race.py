"""Real processes racing the real database on queue_tis (used by the test and the soak).

Schedulers call queue_tis_v1 in a loop; completers claim and finish what was queued (through
claim_tis_v1 / finish_ti_v1). After every step each process checks the invariant in SQL:
no row of limit_usage has used > cap. Every queued TI id is recorded to check none is
queued twice.
"""
from __future__ import annotations

import random
import time

import sqlalchemy as sa

from engine import db

VIOLATIONS = sa.text("SELECT kind, key, cap, used FROM limit_usage WHERE used > cap")


def setup_world(eng, n_tis: int = 400) -> None:
    with eng.begin() as c:
        c.exec_driver_sql("""
            TRUNCATE task_instance, task_instance_history, dag_run, task_dependency, task, dag, pool, executor
                RESTART IDENTITY CASCADE;
            INSERT INTO executor VALUES ('default', 12);
            INSERT INTO pool (name, slots, include_deferred) VALUES
                ('default_pool', 128, false), ('small', 3, false), ('mid', 5, true), ('big', 8, false);
            INSERT INTO dag (dag_id, fileloc, max_active_tasks) VALUES ('a', 'race', 4), ('b', 'race', NULL);
            INSERT INTO task (dag_id, task_id, kind, pool, max_active_tis_per_dag, max_active_tis_per_dagrun) VALUES
                ('a', 'x', 'bash', 'small', NULL, NULL), ('a', 'y', 'bash', 'mid', 3, NULL),
                ('b', 'x', 'bash', 'big', NULL, 2), ('b', 'z', 'bash', 'mid', NULL, NULL);
            INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, created_at)
            SELECT CASE WHEN g < 5 THEN 'a' ELSE 'b' END, 'r' || g, 'manual', 'running',
                   now() + g * interval '1 second', now()
            FROM generate_series(0, 9) g;
        """)
        c.execute(sa.text("""
            INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight,
                                       pool, pool_slots, queue, executor, run_after)
            SELECT r.id, r.dag_id, r.run_id, t.task_id, g / 10, 'scheduled', 1 + mod(g * 7, 5),
                   t.pool, 1 + mod(g, 3), 'default', 'default', r.run_after
            FROM generate_series(0, :n - 1) g
            JOIN dag_run r ON r.id = 1 + mod(g, 10)
            JOIN LATERAL (SELECT * FROM task t WHERE t.dag_id = r.dag_id ORDER BY t.task_id
                          OFFSET mod(g / 10, 2) LIMIT 1) t ON true
            ON CONFLICT DO NOTHING"""), {"n": n_tis})


def scheduler_loop(url: str, seconds: float, seed: int, out) -> None:
    eng = db.make_engine(url)
    rng = random.Random(seed)
    queued, busy, violations = [], 0, []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with eng.begin() as c:
                queued += [r.ti_id for r in c.execute(sa.text("SELECT ti_id FROM queue_tis_v1(:m, :j)"),
                                                      {"m": rng.randint(1, 10), "j": seed})]
        except sa.exc.DBAPIError as exc:
            if not db.is_lock_busy(exc):
                raise
            busy += 1
        with eng.connect() as c:
            violations += [tuple(r) for r in c.execute(VIOLATIONS)]
    eng.dispose()
    out.put({"queued": queued, "busy": busy, "violations": violations})


def completer_loop(url: str, seconds: float, seed: int, out) -> None:
    eng = db.make_engine(url)
    rng = random.Random(seed)
    running, finished, violations = [], 0, []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with db.connect(eng) as c:
            running += db.run(c, "claim_tis", job_id=None, hostname=f"c{seed}", queues=["default"],
                              limit=rng.randint(1, 4), log_dir="/tmp", now=None).all()
        rng.shuffle(running)
        for ti in running[: rng.randint(0, len(running))]:
            with db.connect(eng) as c:
                db.run(c, "finish_ti", ti_id=ti.ti_id, try_number=ti.try_number, exit_code=0, timed_out=False,
                       reason=None, now=None)
            running.remove(ti)
            finished += 1
        with eng.connect() as c:
            violations += [tuple(r) for r in c.execute(VIOLATIONS)]
        time.sleep(rng.random() * 0.01)
    eng.dispose()
    out.put({"finished": finished, "violations": violations})


def race(url: str, seconds: float, schedulers: int = 4, completers: int = 2) -> dict:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=scheduler_loop, args=(url, seconds, i + 1, out)) for i in range(schedulers)]
    procs += [ctx.Process(target=completer_loop, args=(url, seconds, 100 + i, out)) for i in range(completers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    queued = [i for r in results for i in r.get("queued", [])]
    return {
        "queued": len(queued),
        "distinct_queued": len(set(queued)),
        "busy": sum(r.get("busy", 0) for r in results),
        "finished": sum(r.get("finished", 0) for r in results),
        "violations": [v for r in results for v in r["violations"]],
        "exit_codes": [p.exitcode for p in procs],
    }
