"""Benchmark of the critical section (queue_tis, the version the named query calls, or --version N).

    python loadtests/bench_queue.py [--database-url URL] [--version N]
        [--workloads sizes,small,blocked,blocked-churn,surge,starvation] [--sizes 10000,100000,1000000]
        [--blocked 5000,500000] [--latency-calls 50] [--drain-seconds 30]

Workloads (issue 11's targets in parentheses; every figure is printed with the machine's load
average beside it, since a shared machine changes them several times over):
  * sizes: for each backlog size, N scheduled TIs over 1,000 running dag runs (50 DAGs) and 20
    pools, mixed priorities, every limit in play (pool slots with pool_slots 1-3 and
    include_deferred, max_active_tasks, max_active_tis_per_dag, max_active_tis_per_dagrun on
    mapped tasks, executor parallelism). Latency of one call at max_tis=512 with the backlog
    held steady (p50, p99), then drain: call after call, every queued TI completes before the
    next call, p50/p99 per call and TIs queued per second of queue_tis time and of wall time
    (30 s at most), and per second of the calls that queued all 512 (a world drained to its end
    ends in calls its limits let queue fewer) (target 3: >= 20,000 TIs/s, p50 <= 25 ms at 100k;
    1M within 2x);
  * small: 50,000 scheduled TIs, 1,000 runs, every pool filled with running TIs until at most 2
    slots are free, calls at max_tis=32 (target 1: p50 <= 3 ms);
  * blocked: --blocked N TIs at priority 100 ahead of 20,000 runnable ones, in open pools, each
    blocked by its own limit (run at max_active_tasks, task at max_active_tis_per_dag, or
    pool_slots equal to the pool's slots while the pool has a running TI), calls at max_tis=32
    (target 2: p50 <= 5 ms, 500,000 within 2x of 5,000);
  * blocked-churn: "blocked", with the active TI of the run at max_active_tasks ended before
    every call (its run gets room, one of its TIs is queued and kept: full again): what an
    opening partition costs queue_tis_v11's skip entries;
  * surge: 1,000 runs and 50,000 TIs replaced by new ones without refreshing statistics, then
    drained (item 6);
  * starvation: the two Airflow starvation cases: calls until the runnable work is queued.
The header line also gives the time of a 10^7-iteration Python loop: the same machine's figures
vary twofold from day to day, so compare runs beside that yardstick (or alternate them).
Writes loadtests/results/bench_queue.json (bench_queue_mysql.json for MySQL/MariaDB; --out) and
prints one line per measurement. Without --database-url it uses a throw-away embedded
PostgreSQL; with --database-url mysql+pymysql://user@host/db it runs on MySQL/MariaDB (the
database is created when missing; its engine tables are emptied). The data and the calls are the
same on both dialects; only the set-up SQL differs.
"""
from __future__ import annotations

import argparse
import os
import json
import re
import statistics
import sys
import time
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_latency import bench_engine  # noqa: E402
from engine import db  # noqa: E402
from engine.scheduler import queue_knobs

RUNS, DAGS, POOLS, TASKS = 1000, 50, 20, 20

SETUP = """
TRUNCATE task_instance, task_instance_history, dag_run, task_dependency, task, dag, pool, executor
    RESTART IDENTITY CASCADE;
-- (The TRUNCATE trigger emptied the usage counters with DELETEs; their dead rows would be read by
-- every fold of the next workload, a previous drain's hundreds of thousands included. MySQL's
-- set-up truncates them too.)
TRUNCATE usage_delta, used_pool, used_run, used_task, used_task_run, used_executor;
-- (The skip entries too: they name pools by name, and a previous workload's would outlive its TIs.)
TRUNCATE queue_skip, queue_skip_part;
INSERT INTO executor (name, parallelism) VALUES ('default', 2000);
INSERT INTO pool (name, slots, include_deferred)
SELECT 'pool' || g, 40 + 10 * mod(g, 5), mod(g, 4) = 0 FROM generate_series(0, {pools} - 1) g;
INSERT INTO pool (name, slots) VALUES ('default_pool', 128);
INSERT INTO dag (dag_id, fileloc, max_active_tasks)
SELECT 'dag' || g, 'bench', 16 FROM generate_series(0, {dags} - 1) g;
INSERT INTO task (dag_id, task_id, kind, bash_command, pool, pool_slots, max_active_tis_per_dag,
                  max_active_tis_per_dagrun)
SELECT 'dag' || d, 't' || t, 'bash', 'true', 'pool' || mod(d * {tasks} + t, {pools}), 1 + (mod(t, 7) = 0)::int,
       CASE WHEN mod(t, 5) = 1 THEN 30 END, CASE WHEN mod(t, 5) = 2 THEN 3 END
FROM generate_series(0, {dags} - 1) d, generate_series(0, {tasks} - 1) t;
INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, created_at)
SELECT 'dag' || mod(g, {dags}), 'run' || g, 'manual', 'running',
       timestamptz '2026-01-01' + g * interval '1 minute', now()
FROM generate_series(0, {runs} - 1) g;
INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                           pool_slots, queue, executor, run_after)
SELECT r.id, r.dag_id, r.run_id, t.task_id, i / ({runs} * {tasks}), 'scheduled', 1 + (hashtext(t.task_id || r.dag_id) & 7),
       t.pool, t.pool_slots, 'default', 'default', r.run_after
FROM generate_series(0, {n} - 1) i
JOIN dag_run r ON r.id = 1 + mod(i, {runs})
JOIN task t ON t.dag_id = r.dag_id AND t.task_id = 't' || mod(i / {runs}, {tasks});
ANALYZE;
"""

# The same world on MySQL/MariaDB: no generate_series (a JSON_TABLE over an n-element array,
# {seq_x} below, numbers g from 0), no TRUNCATE ... CASCADE (foreign key checks off meanwhile;
# TRUNCATE restarts AUTO_INCREMENT; it runs no trigger, so the usage counters are emptied with
# the TIs, and the skip entries with their log), CRC32 for hashtext, DIV for integer division.
MYSQL_SETUP = """
SET FOREIGN_KEY_CHECKS = 0;
TRUNCATE task_instance;
TRUNCATE task_instance_history;
TRUNCATE dag_run;
TRUNCATE task_dependency;
TRUNCATE task;
TRUNCATE dag;
TRUNCATE pool;
TRUNCATE executor;
TRUNCATE usage_delta;
TRUNCATE used_pool;
TRUNCATE used_run;
TRUNCATE used_task;
TRUNCATE used_task_run;
TRUNCATE used_executor;
TRUNCATE queue_skip;
TRUNCATE queue_skip_part;
TRUNCATE queue_skip_log;
SET FOREIGN_KEY_CHECKS = 1;
INSERT INTO executor (name, parallelism) VALUES ('default', 2000);
INSERT INTO pool (name, slots, include_deferred)
SELECT CONCAT('pool', g.i - 1), 40 + 10 * MOD(g.i - 1, 5), MOD(g.i - 1, 4) = 0 FROM {seq_pools} g;
INSERT INTO pool (name, slots) VALUES ('default_pool', 128);
INSERT INTO dag (dag_id, fileloc, max_active_tasks)
SELECT CONCAT('dag', g.i - 1), 'bench', 16 FROM {seq_dags} g;
INSERT INTO task (dag_id, task_id, kind, bash_command, pool, pool_slots, max_active_tis_per_dag,
                  max_active_tis_per_dagrun)
SELECT CONCAT('dag', d.i - 1), CONCAT('t', t.i - 1), 'bash', 'true', CONCAT('pool', MOD((d.i - 1) * {tasks} + t.i - 1, {pools})),
       1 + (MOD(t.i - 1, 7) = 0), CASE WHEN MOD(t.i - 1, 5) = 1 THEN 30 END, CASE WHEN MOD(t.i - 1, 5) = 2 THEN 3 END
FROM {seq_dags} d, {seq_tasks} t;
INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, created_at)
SELECT CONCAT('dag', MOD(g.i - 1, {dags})), CONCAT('run', g.i - 1), 'manual', 'running',
       TIMESTAMP '2026-01-01 00:00:00' + INTERVAL (g.i - 1) MINUTE, UTC_TIMESTAMP(6)
FROM {seq_runs} g;
INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                           pool_slots, queue, executor, run_after)
SELECT r.id, r.dag_id, r.run_id, t.task_id, (s.i - 1) DIV ({runs} * {tasks}), 'scheduled',
       1 + (CRC32(CONCAT(t.task_id, r.dag_id)) & 7), t.pool, t.pool_slots, 'default', 'default', r.run_after
FROM {seq_n} s
JOIN dag_run r ON r.id = 1 + MOD(s.i - 1, {runs})
JOIN task t ON t.dag_id = r.dag_id AND t.task_id = CONCAT('t', MOD((s.i - 1) DIV {runs}, {tasks}));
ANALYZE TABLE task_instance, dag_run, task, dag, pool, executor;
"""


def seq(n: int) -> str:
    """MySQL: a table of n rows numbered i = 1..n (JSON_TABLE: MariaDB 10.6+, MySQL 8)."""
    array = "'[]'" if n <= 0 else f"CONCAT('[', REPEAT('0,', {n - 1}), '0]')"
    return f"JSON_TABLE({array}, '$[*]' COLUMNS (i FOR ORDINALITY))"


def is_mysql(eng) -> bool:
    return db.dialect_dir(eng) == "mysql"


def script(c, text: str) -> None:
    """Run a ';'-separated script one statement at a time (PyMySQL sends one per call)."""
    for stmt in text.split(";\n"):
        if stmt.strip():
            c.exec_driver_sql(stmt)


def install_prototypes(eng, paths: list[str]) -> None:
    """Install routines from files (a prototype under a number no release uses), for the A/B
    harnesses in baselines/: on PostgreSQL each file as one script, on MySQL/MariaDB each file one
    CREATE PROCEDURE, dropped first."""
    for path in paths:
        text = Path(path).read_text()
        with eng.begin() as c:
            raw = c.connection.driver_connection
            if is_mysql(eng):
                cur = raw.cursor()
                cur.execute("DROP PROCEDURE IF EXISTS " + re.search(r"CREATE PROCEDURE (\w+)", text).group(1))
                cur.execute(text)
            else:
                raw.execute(text)   # (no parameters: '%' stays as it is)


def setup_sql(eng, pools: int, dags: int, tasks: int, runs: int, n: int) -> str:
    if is_mysql(eng):
        return MYSQL_SETUP.format(pools=pools, dags=dags, tasks=tasks, runs=runs, seq_pools=seq(pools),
                                  seq_dags=seq(dags), seq_tasks=seq(tasks), seq_runs=seq(runs), seq_n=seq(n))
    return SETUP.format(pools=pools, dags=dags, tasks=tasks, runs=runs, n=n)


VERSION: int | None = None  # --version: queue_tis_v<N> instead of the named query
VERSION_CALL = {"postgresql": "SELECT * FROM queue_tis_v{v}(:max_tis, :job_id, :now)",
                "mysql": "CALL queue_tis_v{v}(:max_tis, :job_id, :now, 2)"}


def call(eng, max_tis: int) -> tuple[list[int], float]:
    t0 = time.perf_counter()
    with eng.begin() as c:
        if VERSION is None:
            rows = db.run(c, "queue_tis", max_tis=max_tis, job_id=None, now=None, **queue_knobs())
        else:
            rows = c.execute(sa.text(VERSION_CALL[db.dialect_dir(eng)].format(v=VERSION)),
                             {"max_tis": max_tis, "job_id": None, "now": None}).all()
        ids = [r.ti_id for r in rows]
    return ids, time.perf_counter() - t0


def setup(eng, n: int) -> float:
    t0 = time.perf_counter()
    with eng.begin() as c:
        script(c, setup_sql(eng, POOLS, DAGS, TASKS, RUNS, n))
    return time.perf_counter() - t0


def set_state(eng, ids: list[int], state: str, clear_queued: bool = False) -> None:
    stmt = sa.text(f"UPDATE task_instance SET state = :s{', queued_at = NULL' if clear_queued else ''} "
                   "WHERE id IN :ids").bindparams(sa.bindparam("ids", expanding=True))
    with eng.begin() as c:
        c.execute(stmt, {"s": state, "ids": ids})


def latency(eng, n: int, calls: int, max_tis: int = 512, before=None) -> dict:
    """Backlog held at n: what a call queues is put back to scheduled afterwards (before: run
    before each call, outside its time; it may keep TIs out of the put-back by returning their ids)."""
    times = []
    queued = 0
    for _ in range(calls):
        keep = before() if before else set()
        ids, dt = call(eng, max_tis)
        queued += len(ids)
        times.append(dt)
        set_state(eng, [i for i in ids if i not in keep], "scheduled", clear_queued=True)
    times.sort()
    return {"calls": calls, "queued_per_call": len(ids), "p50_ms": round(statistics.median(times) * 1000, 1),
            "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1000, 1),
            "tis_per_s": round(queued / sum(times)) if times else 0, "load": load()}


def load() -> str:
    return "%.2f %.2f %.2f" % os.getloadavg()


def machine_speed() -> float:
    """Seconds a 10^7-iteration Python loop takes (the median of three): one machine's figures
    vary twofold from one day to the next, so a result is read beside this yardstick."""
    loop = compile("for i in range(10**7): pass", "<yardstick>", "exec")  # as `python -c` runs it
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        exec(loop, {})
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times), 2)


def drain(eng, seconds: float) -> dict:
    queued = 0
    in_calls = 0.0
    start = time.perf_counter()
    calls = 0
    times = []
    full_t, full_n = 0.0, 0   # the calls that queued all 512: the drain's body, before the tail
    while time.perf_counter() - start < seconds:
        ids, dt = call(eng, 512)
        times.append(dt)
        calls += 1
        in_calls += dt
        queued += len(ids)
        if len(ids) == 512:
            full_t += dt
            full_n += 1
        if not ids:
            break
        set_state(eng, ids, "success")  # the emulated workers finish everything at once
    wall = time.perf_counter() - start
    times.sort()
    return {"calls": calls, "queued": queued, "tis_per_s_in_queue_tis": round(queued / in_calls), "load": load(),
            "p50_ms": round(statistics.median(times) * 1000, 1),
            "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1000, 1),
            "tis_per_s_wall": round(queued / wall), "seconds": round(wall, 1),
            # (A world drained to its end ends in calls that queue fewer than 512: what its limits
            # let through once the backlog is thin. The figures above count them; these do not.)
            "full_calls": full_n, "tis_per_s_full_calls": round(full_n * 512 / full_t) if full_t else 0}


# Workload "small" (issue 11, target 1): 50,000 scheduled TIs over 1,000 running runs, every
# pool filled with running TIs (in id order) until at most 2 of its slots are free, so that a call
# can queue only ~30-40 TIs; calls at max_tis=32, what a call queues is put back.
FILL_POOLS = {
    "postgresql": """
        UPDATE task_instance ti SET state = 'running', queued_at = now(), start_date = now()
        FROM (SELECT t.id, sum(t.pool_slots) OVER (PARTITION BY t.pool ORDER BY t.id) AS cum FROM task_instance t) x,
             pool p
        WHERE ti.id = x.id AND p.name = ti.pool AND x.cum <= p.slots - 2;
        ANALYZE;""",
    "mysql": """
        CREATE TEMPORARY TABLE bench_fill AS
        SELECT x.id FROM (SELECT t.id, t.pool, SUM(t.pool_slots) OVER (PARTITION BY t.pool ORDER BY t.id) AS cum
                          FROM task_instance t) x JOIN pool p ON p.name = x.pool WHERE x.cum <= p.slots - 2;
        UPDATE task_instance ti JOIN bench_fill f ON f.id = ti.id
        SET ti.state = 'running', ti.queued_at = UTC_TIMESTAMP(6), ti.start_date = UTC_TIMESTAMP(6);
        DROP TEMPORARY TABLE bench_fill;
        ANALYZE TABLE task_instance;""",
}

# Workload "blocked" (target 2): on top of 20,000 runnable scheduled TIs (priorities 1-8), N TIs
# at priority 100, in open pools, each blocked by its own limit: a third in a run whose DAG has
# max_active_tasks 1 and one running TI, a third of tasks at max_active_tis_per_dag 1 with one
# running TI each, a third of tasks whose pool_slots equal their pool's slots (the pool has a
# running TI, so they never fit). One DAG per kind, 20 tasks each (one per pool).
BLOCKED = {
    "postgresql": """
        INSERT INTO dag (dag_id, fileloc, max_active_tasks) VALUES ('blk_run', 'bench', 1), ('blk_task', 'bench', NULL),
            ('blk_wide', 'bench', NULL);
        INSERT INTO task (dag_id, task_id, kind, bash_command, pool, pool_slots, max_active_tis_per_dag)
        SELECT k.dag_id, 'p' || g, 'bash', 'true', 'pool' || g,
               CASE WHEN k.dag_id = 'blk_wide' THEN 40 + 10 * mod(g, 5) ELSE 1 END,
               CASE WHEN k.dag_id = 'blk_task' THEN 1 END
        FROM (VALUES ('blk_run'), ('blk_task'), ('blk_wide')) k(dag_id), generate_series(0, {pools} - 1) g;
        INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, created_at)
        SELECT k.dag_id, 'b0', 'manual', 'running', timestamptz '2025-12-31', now()
        FROM (VALUES ('blk_run'), ('blk_task'), ('blk_wide')) k(dag_id);
        INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                                   pool_slots, queue, executor, run_after)
        SELECT r.id, r.dag_id, r.run_id, t.task_id, -1, 'running', 100, t.pool, t.pool_slots, 'default', 'default',
               r.run_after
        FROM dag_run r JOIN task t ON t.dag_id = r.dag_id
        WHERE r.dag_id = 'blk_task' OR (r.dag_id = 'blk_run' AND t.task_id = 'p0');
        INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                                   pool_slots, queue, executor, run_after)
        SELECT r.id, r.dag_id, r.run_id, t.task_id, i / ({pools} * 3), 'scheduled', 100, t.pool, t.pool_slots,
               'default', 'default', r.run_after
        FROM generate_series(0, {n} - 1) i
        JOIN dag_run r ON r.dag_id = (ARRAY['blk_run', 'blk_task', 'blk_wide'])[1 + mod(i, 3)]
        JOIN task t ON t.dag_id = r.dag_id AND t.task_id = 'p' || mod(i / 3, {pools});
        ANALYZE;""",
    "mysql": """
        INSERT INTO dag (dag_id, fileloc, max_active_tasks) VALUES ('blk_run', 'bench', 1), ('blk_task', 'bench', NULL),
            ('blk_wide', 'bench', NULL);
        INSERT INTO task (dag_id, task_id, kind, bash_command, pool, pool_slots, max_active_tis_per_dag)
        SELECT k.dag_id, CONCAT('p', g.i - 1), 'bash', 'true', CONCAT('pool', g.i - 1),
               CASE WHEN k.dag_id = 'blk_wide' THEN 40 + 10 * MOD(g.i - 1, 5) ELSE 1 END,
               CASE WHEN k.dag_id = 'blk_task' THEN 1 END
        FROM (SELECT 'blk_run' AS dag_id UNION ALL SELECT 'blk_task' UNION ALL SELECT 'blk_wide') k, {seq_pools} g;
        INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, created_at)
        SELECT k.dag_id, 'b0', 'manual', 'running', TIMESTAMP '2025-12-31 00:00:00', UTC_TIMESTAMP(6)
        FROM (SELECT 'blk_run' AS dag_id UNION ALL SELECT 'blk_task' UNION ALL SELECT 'blk_wide') k;
        INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                                   pool_slots, queue, executor, run_after)
        SELECT r.id, r.dag_id, r.run_id, t.task_id, -1, 'running', 100, t.pool, t.pool_slots, 'default', 'default',
               r.run_after
        FROM dag_run r JOIN task t ON t.dag_id = r.dag_id
        WHERE r.dag_id = 'blk_task' OR (r.dag_id = 'blk_run' AND t.task_id = 'p0');
        INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                                   pool_slots, queue, executor, run_after)
        SELECT r.id, r.dag_id, r.run_id, t.task_id, (s.i - 1) DIV ({pools} * 3), 'scheduled', 100, t.pool, t.pool_slots,
               'default', 'default', r.run_after
        FROM {seq_n} s
        JOIN dag_run r ON r.dag_id = ELT(1 + MOD(s.i - 1, 3), 'blk_run', 'blk_task', 'blk_wide')
        JOIN task t ON t.dag_id = r.dag_id AND t.task_id = CONCAT('p', MOD((s.i - 1) DIV 3, {pools}));
        ANALYZE TABLE task_instance, dag_run, task, dag;""",
}


# Workload "surge" (issue 11, item 6): the world of "sizes" at 50,000 TIs is loaded and ANALYZEd,
# then every run and TI is deleted and 1,000 new runs with 50,000 new scheduled TIs are created,
# WITHOUT refreshing statistics (autovacuum off on those tables meanwhile, PostgreSQL); then
# queue_tis drains them (max_tis=512, every queued TI completes before the next call).
SURGE = {
    "postgresql": """
        ALTER TABLE task_instance SET (autovacuum_enabled = false);
        ALTER TABLE dag_run SET (autovacuum_enabled = false);
        DELETE FROM task_instance;
        DELETE FROM dag_run;
        INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, created_at)
        SELECT 'dag' || mod(g, {dags}), 'surge' || g, 'manual', 'running',
               timestamptz '2026-02-01' + g * interval '1 minute', now()
        FROM generate_series(0, {runs} - 1) g;
        INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                                   pool_slots, queue, executor, run_after)
        SELECT r.id, r.dag_id, r.run_id, t.task_id, i / ({runs} * {tasks}), 'scheduled', 1 + (hashtext(t.task_id || r.dag_id) & 7),
               t.pool, t.pool_slots, 'default', 'default', r.run_after
        FROM generate_series(0, {n} - 1) i
        JOIN dag_run r ON r.run_id = 'surge' || mod(i, {runs})
        JOIN task t ON t.dag_id = r.dag_id AND t.task_id = 't' || mod(i / {runs}, {tasks});""",
    "mysql": """
        DELETE FROM task_instance;
        DELETE FROM dag_run;
        INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, created_at)
        SELECT CONCAT('dag', MOD(g.i - 1, {dags})), CONCAT('surge', g.i - 1), 'manual', 'running',
               TIMESTAMP '2026-02-01 00:00:00' + INTERVAL (g.i - 1) MINUTE, UTC_TIMESTAMP(6)
        FROM {seq_runs} g;
        INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                                   pool_slots, queue, executor, run_after)
        SELECT r.id, r.dag_id, r.run_id, t.task_id, (s.i - 1) DIV ({runs} * {tasks}), 'scheduled',
               1 + (CRC32(CONCAT(t.task_id, r.dag_id)) & 7), t.pool, t.pool_slots, 'default', 'default', r.run_after
        FROM {seq_n} s
        JOIN dag_run r ON r.run_id = CONCAT('surge', MOD(s.i - 1, {runs}))
        JOIN task t ON t.dag_id = r.dag_id AND t.task_id = CONCAT('t', MOD((s.i - 1) DIV {runs}, {tasks}));""",
}
SURGE_END = {"postgresql": """
        ALTER TABLE task_instance RESET (autovacuum_enabled);
        ALTER TABLE dag_run RESET (autovacuum_enabled);""", "mysql": "SELECT 1"}


def workload_surge(eng, seconds: float) -> dict:
    setup(eng, 50_000)
    dialect = db.dialect_dir(eng)
    with eng.begin() as c:
        script(c, SURGE[dialect].format(dags=DAGS, runs=RUNS, tasks=TASKS, n=50_000, seq_runs=seq(RUNS), seq_n=seq(50_000)))
    try:
        dr = drain(eng, seconds)
    finally:
        with eng.begin() as c:
            script(c, SURGE_END[dialect])
    return {"drain": dr}


def make_world(eng, world: str) -> tuple[str, int]:
    """One of the A/B harnesses' worlds (loadtests/baselines): a number (a drain at max_tis 512 of
    that many scheduled TIs), small (50,000 scheduled, pools nearly full, max_tis 32) or blockedN
    (N blocked TIs ahead of 20,000, max_tis 32). Returns what was made and the world's max_tis."""
    dialect = db.dialect_dir(eng)
    if world.isdigit():
        return f"{int(world):,} scheduled TIs: {setup(eng, int(world)):.1f} s", 512
    if world == "small":
        setup(eng, 50_000)
        with eng.begin() as c:
            script(c, FILL_POOLS[dialect])
        return "the small world", 32
    if world.startswith("blocked") and world[7:].isdigit():
        setup(eng, 20_000)
        n = int(world[7:])
        with eng.begin() as c:
            script(c, BLOCKED[dialect].format(pools=POOLS, n=n, seq_pools=seq(POOLS), seq_n=seq(n)))
        return f"{n:,} blocked ahead of 20,000", 32
    raise SystemExit(f"WORLD {world!r}: a number, small or blockedN")


def settle(eng, ids: list[int], max_tis: int) -> None:
    """After a call on one of make_world's worlds: a drain's TIs (max_tis 512) finish, so the
    backlog shrinks as in production; a small or blocked world's go back to scheduled, so every
    call meets the same world."""
    if ids and max_tis == 512:
        set_state(eng, ids, "success")
    elif ids:
        set_state(eng, ids, "scheduled", clear_queued=True)


def workload_small(eng, calls: int) -> dict:
    load_s = setup(eng, 50_000)
    with eng.begin() as c:
        script(c, FILL_POOLS[db.dialect_dir(eng)])
    return {"load_s": round(load_s, 1), "latency": latency(eng, 50_000, calls, max_tis=32)}


def workload_blocked(eng, n: int, calls: int, churn: bool = False) -> dict:
    """churn: before every call the active TI of run blk_run ends, so its run has room again; the
    call queues its next TI (kept queued: the run is full again) and the other blocked TIs stay
    blocked. Every call then meets a partition that changed since the previous one."""
    load_s = setup(eng, 20_000)
    with eng.begin() as c:
        script(c, BLOCKED[db.dialect_dir(eng)].format(pools=POOLS, n=n, seq_pools=seq(POOLS), seq_n=seq(n)))

    def end_blk_run() -> set:
        with eng.begin() as c:
            c.execute(sa.text("UPDATE task_instance SET state = 'success' "
                              "WHERE dag_id = 'blk_run' AND state IN ('running', 'queued')"))
            return {r.id for r in c.execute(sa.text("SELECT id FROM task_instance WHERE dag_id = 'blk_run' "
                                                    "AND state = 'scheduled'"))}

    return {"load_s": round(load_s, 1), "latency": latency(eng, n, calls, max_tis=32, before=end_blk_run if churn else None)}


# The two Airflow starvation cases, per dialect ({seq_x}: see seq()).
STARVATION_45636 = {
    "postgresql": """
            UPDATE pool SET slots = 20, include_deferred = false WHERE name IN ('pool0', 'pool1');
            UPDATE dag SET max_active_tasks = NULL;
            INSERT INTO task (dag_id, task_id, kind, pool) VALUES ('dag0', 'a', 'bash', 'pool0'), ('dag0', 'b', 'bash', 'pool1');
            INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                                       pool_slots, queue, executor, run_after)
            SELECT 1, 'dag0', 'run0', 'a', g, CASE WHEN g < 19 THEN 'running' ELSE 'scheduled' END, 2, 'pool0', 1,
                   'default', 'default', now() FROM generate_series(0, 1018) g;
            INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                                       pool_slots, queue, executor, run_after)
            SELECT 1, 'dag0', 'run0', 'b', g, 'scheduled', 1, 'pool1', 1, 'default', 'default', now()
            FROM generate_series(0, 99) g;
            ANALYZE;""",
    "mysql": """
            UPDATE pool SET slots = 20, include_deferred = false WHERE name IN ('pool0', 'pool1');
            UPDATE dag SET max_active_tasks = NULL;
            INSERT INTO task (dag_id, task_id, kind, pool) VALUES ('dag0', 'a', 'bash', 'pool0'), ('dag0', 'b', 'bash', 'pool1');
            INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                                       pool_slots, queue, executor, run_after)
            SELECT 1, 'dag0', 'run0', 'a', g.i - 1, CASE WHEN g.i - 1 < 19 THEN 'running' ELSE 'scheduled' END, 2,
                   'pool0', 1, 'default', 'default', UTC_TIMESTAMP(6) FROM {seq_1019} g;
            INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                                       pool_slots, queue, executor, run_after)
            SELECT 1, 'dag0', 'run0', 'b', g.i - 1, 'scheduled', 1, 'pool1', 1, 'default', 'default', UTC_TIMESTAMP(6)
            FROM {seq_100} g;
            ANALYZE TABLE task_instance;""",
}
STARVATION_18131 = {
    "postgresql": """
            UPDATE pool SET slots = 1000; UPDATE executor SET parallelism = NULL;
            UPDATE dag SET max_active_tasks = CASE WHEN dag_id = 'dag0' THEN 1 END;
            INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                                       pool_slots, queue, executor, run_after)
            SELECT r.id, r.dag_id, r.run_id, 't0', g, 'scheduled', CASE WHEN r.dag_id = 'dag0' THEN 10 ELSE 1 END,
                   'pool0', 1, 'default', 'default', r.run_after
            FROM dag_run r, generate_series(0, 199) g;
            ANALYZE;""",
    "mysql": """
            UPDATE pool SET slots = 1000;
            UPDATE executor SET parallelism = NULL;
            UPDATE dag SET max_active_tasks = CASE WHEN dag_id = 'dag0' THEN 1 END;
            INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, pool,
                                       pool_slots, queue, executor, run_after)
            SELECT r.id, r.dag_id, r.run_id, 't0', g.i - 1, 'scheduled', CASE WHEN r.dag_id = 'dag0' THEN 10 ELSE 1 END,
                   'pool0', 1, 'default', 'default', r.run_after
            FROM dag_run r, {seq_200} g;
            ANALYZE TABLE task_instance;""",
}


def starvation(eng) -> dict:
    out = {}
    dialect = db.dialect_dir(eng)
    seqs = {f"seq_{k}": seq(k) for k in (100, 200, 1019)}
    with eng.begin() as c:
        script(c, setup_sql(eng, pools=2, dags=1, tasks=1, runs=1, n=0))
        script(c, STARVATION_45636[dialect].format(**seqs) if dialect == "mysql" else STARVATION_45636[dialect])
    ids, dt = call(eng, 32)
    with eng.connect() as c:
        by_pool = dict(c.execute(sa.text("SELECT pool, count(*) FROM task_instance WHERE state = 'queued' GROUP BY pool")).all())
    out["airflow_45636"] = {"calls": 1, "queued_pool_a": by_pool.get("pool0", 0), "queued_pool_b": by_pool.get("pool1", 0),
                            "ms": round(dt * 1000, 1)}
    with eng.begin() as c:
        script(c, setup_sql(eng, pools=1, dags=4, tasks=1, runs=4, n=0))
        script(c, STARVATION_18131[dialect].format(**seqs) if dialect == "mysql" else STARVATION_18131[dialect])
    ids, dt = call(eng, 64)
    with eng.connect() as c:
        by_dag = dict(c.execute(sa.text("SELECT dag_id = 'dag0', count(*) FROM task_instance WHERE state = 'queued' GROUP BY 1")).all())
    out["airflow_18131"] = {"calls": 1, "queued_dag_a": by_dag.get(True, 0), "queued_others": by_dag.get(False, 0),
                            "ms": round(dt * 1000, 1)}
    return out


def main() -> int:
    global VERSION
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url", help="a PostgreSQL or MySQL/MariaDB database to use (its engine tables are "
                                           "emptied!)")
    ap.add_argument("--workloads", default="sizes,small,blocked,starvation",
                    help="comma-separated: sizes (latency at 512 and drain per --sizes), small (target 1), "
                         "blocked (target 2, per --blocked), blocked-churn (the same, a blocking run gets room "
                         "before every call), surge (item 6), starvation")
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--blocked", default="5000,500000", help="blocked TIs ahead of the runnable ones")
    ap.add_argument("--version", type=int, help="call queue_tis_v<N> (default: the named query, the newest)")
    ap.add_argument("--latency-calls", type=int, default=50)
    ap.add_argument("--drain-seconds", type=float, default=30)
    ap.add_argument("--out", help="results file (default loadtests/results/bench_queue.json, "
                                   "bench_queue_mysql.json on MySQL/MariaDB)")
    args = ap.parse_args()
    VERSION = args.version
    work = set(args.workloads.split(","))
    eng = bench_engine(args.database_url)
    mysql = is_mysql(eng)
    args.out = args.out or str(Path(__file__).parent / "results" / ("bench_queue_mysql.json" if mysql else "bench_queue.json"))
    with eng.connect() as c:
        if mysql:
            server = c.execute(sa.text("SELECT VERSION()")).scalar()
            server = f"MariaDB {server}" if "mariadb" in server.lower() else f"MySQL {server}"
        else:
            server = "PostgreSQL " + c.execute(sa.text("SHOW server_version")).scalar()
            if c.execute(sa.text("SHOW autovacuum")).scalar() == "off":
                server += (" (autovacuum off: the dead rows of usage_delta and task_instance pile up through the "
                           "run and slow every call; a deployment vacuums them)")
    fn = f"queue_tis_v{VERSION}" if VERSION else "queue_tis (named query)"
    speed = machine_speed()
    print(f"{server}, {fn}, load average {load()} at start; a 10^7-iteration Python loop takes {speed} s",
          flush=True)
    results = {"server": server, "function": fn, "loop_10m_s": speed, "sizes": {}, "blocked": {}}
    if "small" in work:
        r = results["small"] = workload_small(eng, args.latency_calls)
        lat = r["latency"]
        print(f"small passes (50,000 scheduled, pools nearly full, max_tis=32): p50 {lat['p50_ms']} ms, "
              f"p99 {lat['p99_ms']} ms, {lat['queued_per_call']} queued per call, {lat['tis_per_s']:,} TIs/s "
              f"[load {lat['load']}]", flush=True)
    if "blocked" in work:
        for n in [int(x) for x in args.blocked.split(",")]:
            r = results["blocked"][n] = workload_blocked(eng, n, args.latency_calls)
            lat = r["latency"]
            print(f"blocked {n:>9,} ahead (20,000 runnable, max_tis=32): p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, "
                  f"{lat['queued_per_call']} queued per call, {lat['tis_per_s']:,} TIs/s [load {lat['load']}]", flush=True)
    if "blocked-churn" in work:
        for n in [int(x) for x in args.blocked.split(",")]:
            r = results.setdefault("blocked_churn", {})[n] = workload_blocked(eng, n, args.latency_calls, churn=True)
            lat = r["latency"]
            print(f"blocked {n:>9,} ahead, a blocking run gets room before every call (max_tis=32): p50 {lat['p50_ms']} "
                  f"ms, p99 {lat['p99_ms']} ms, {lat['queued_per_call']} queued per call [load {lat['load']}]", flush=True)
    if "surge" in work:
        r = results["surge"] = workload_surge(eng, max(args.drain_seconds, 120))
        dr = r["drain"]
        print(f"surge (1,000 runs and 50,000 TIs replaced, statistics not refreshed, max_tis=512): "
              f"{dr['queued']:,} queued in {dr['seconds']} s, {dr['calls']} calls, p50 {dr['p50_ms']} ms, "
              f"p99 {dr['p99_ms']} ms, {dr['tis_per_s_in_queue_tis']:,} TIs/s in queue_tis [load {dr['load']}]", flush=True)
    if "sizes" in work:
        for n in [int(x) for x in args.sizes.split(",")]:
            load_s = setup(eng, n)
            lat = latency(eng, n, args.latency_calls)
            dr = drain(eng, args.drain_seconds)
            results["sizes"][n] = {"load_s": round(load_s, 1), "latency": lat, "drain": dr}
            print(f"backlog {n:>9,}: p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms per call of 512 [load {lat['load']}]; "
                  f"drain p50 {dr['p50_ms']} ms, p99 {dr['p99_ms']} ms, {dr['tis_per_s_in_queue_tis']:,} TIs/s in "
                  f"queue_tis ({dr['tis_per_s_wall']:,}/s wall; {dr['tis_per_s_full_calls']:,}/s in the "
                  f"{dr['full_calls']} of {dr['calls']} calls that queued 512) [load {dr['load']}]", flush=True)
    if "starvation" in work:
        results["starvation"] = starvation(eng)
        s = results["starvation"]
        print(f"Airflow 45636: one call queued {s['airflow_45636']['queued_pool_a']} of pool A, "
              f"{s['airflow_45636']['queued_pool_b']} of pool B ({s['airflow_45636']['ms']} ms)")
        print(f"Airflow 18131: one call queued {s['airflow_18131']['queued_dag_a']} of dag_a, "
              f"{s['airflow_18131']['queued_others']} of the others ({s['airflow_18131']['ms']} ms)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"results: {args.out}; load average {load()} at the end")
    eng.dispose()
    return 0


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    sys.exit(handle_errors(main)())
