"""Real processes racing the real database on queue_tis (used by the test and the soak).

Schedulers call queue_tis in a loop, each a given version (a rolling upgrade runs schedulers of
several releases at once: queue_tis_v1, v2 and v3 share the lock row); completers claim and
finish what was queued (through the named queries claim_tis / finish_ti). After every step each
process checks the invariant in SQL: no row of limit_usage has used > cap. Every queued TI id is
recorded to check none is queued twice.

The race is timed by its parent, never by how fast a process starts (see Window): every process
starts racing at once when all are ready, and they stop together once `seconds` have passed and
the database shows the race did what the test needs (`enough`, a SQL condition).

With preempt=True (preemptible pools and tasks) schedulers also call preempt_v1 after each
queue_tis, and completers act as workers: each registers a job, heartbeats its running tries
(heartbeat_v3) and drops the ones the answer says to stop (a preempted try); every claimed
(ti_id, try_number) is recorded to check no try is claimed twice.
"""
from __future__ import annotations

import json
import random
import time
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from engine import db
from tests.world import call_queue_tis, reset

# `key` is a reserved word in MySQL: select every column rather than name it.
VIOLATIONS = sa.text("SELECT * FROM limit_usage WHERE used > cap")


def transient(exc: BaseException) -> bool:
    """A scheduler lock held by another caller, or what the server broke and the engine's
    scheduler step and worker retry next time (preempt_v1 and a worker's heartbeat lock TI rows):
    db.is_transient, a deadlock, serialization failure or lock wait timeout (the same test as
    the engine's: a 40001 failed the race before, though the engine retries it)."""
    return db.is_lock_busy(exc) or db.is_transient(exc)


def deadlock(exc: BaseException) -> bool:
    """A deadlock proper (counted: loadtests/bench_preempt_deadlocks.py reports them; on MariaDB
    a 1205 is also how a held scheduler lock answers NOWAIT, so it is not counted)."""
    return db.error_code(exc) in ("40P01", 1213)


# The next late (high-priority) TI to arrive, where it can cause a preemption: its pool is full of
# running tries it outranks and the executor has room. Released at random instead, the late TIs
# all arrived in the race's first second and then simply went first; on a slow machine no pool
# was full of outranked tries in that second, and the race saw no preemption at all (CI, once).
# Most late TIs arrive this way; one in ten tries releases one anywhere, so all arrive in the end.
LATE_WHERE_PREEMPTION_CAN_HAPPEN = sa.text("""
    SELECT min(ti.id) FROM task_instance ti JOIN pool p ON p.name = ti.pool
    WHERE ti.state = 'none' AND p.preempt_margin IS NOT NULL
      AND ti.pool_slots + (SELECT coalesce(sum(a.pool_slots), 0) FROM task_instance a
                           WHERE a.pool = ti.pool AND a.state IN ('queued', 'running', 'preempting')) > p.slots
      AND EXISTS (SELECT 1 FROM task_instance v WHERE v.pool = ti.pool AND v.state = 'running'
                    AND v.priority_weight <= ti.priority_weight - p.preempt_margin)
      AND (SELECT count(*) FROM task_instance a WHERE a.state IN ('queued', 'running', 'preempting', 'deferred'))
          < (SELECT x.parallelism FROM executor x WHERE x.name = 'default')""")
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
ENOUGH_WITHIN = 240.0  # seconds the parent waits, after `seconds`, for `enough` to hold
# With preempt, a claimed try runs up to HOLD seconds (uniform) before its completer may finish it.
# Finished at once, tries left a pool full of running tries only for a few milliseconds, and
# whether a preemption happened at all hung on the machine's speed (CI saw none in 250 s, twice).
HOLD = 0.5


class Window:
    """When racing processes race: each calls racing() once it is ready and loops while it
    returns True; the parent (run) opens the window when all are ready and closes it."""

    def __init__(self, ctx):
        self.ready, self.go, self.stop = ctx.Semaphore(0), ctx.Event(), ctx.Event()
        self.started = False  # each process has its own copy

    def racing(self) -> bool:
        if not self.started:  # the first call: ready; wait for the others
            self.started = True
            self.ready.release()
            self.go.wait()
        return not self.stop.is_set()

    def run(self, url: str, procs: list, out, seconds: float, enough: str | None) -> list[dict]:
        """Start procs, open the window once all are ready, keep it open `seconds` and then
        until the SQL condition `enough` holds (ENOUGH_WITHIN at most), collect each result."""
        for p in procs:
            p.start()
        ready = 0  # a process that dies before it is ready: its exit code says so
        while ready < len(procs) and all(p.exitcode in (None, 0) for p in procs):
            ready += self.ready.acquire(timeout=1)
        self.go.set()
        time.sleep(seconds)
        if enough is not None:
            eng = db.make_engine(url)
            deadline = time.monotonic() + ENOUGH_WITHIN
            while time.monotonic() < deadline and all(p.exitcode in (None, 0) for p in procs):
                with eng.connect() as c:
                    if c.execute(sa.text(enough)).scalar():
                        break
                time.sleep(0.2)
            eng.dispose()
        self.stop.set()
        results = []
        for _ in procs:
            try:
                results.append(out.get(timeout=120))
            except Exception:  # noqa: BLE001 - a process died: its exit code says so
                break
        for p in procs:
            p.join(timeout=30)
        return results


def setup_world(eng, n_tis: int = 400, dotted: bool = False, preempt: bool = False) -> None:
    """Pools, DAGs, tasks and ten running runs with n_tis scheduled TIs; every limit in play.
    Written with dialect-neutral statements (rows built here), so it runs on both dialects.
    dotted: DAG 'x.y' task 'z' (at most 3 at once) and DAG 'x' task 'y.z' (at most 2), whose
    names join to the same 'x.y.z' (queue_tis_v1 cannot run on that world)."""
    pools = [("default_pool", 128, False), ("small", 3, False), ("mid", 5, True), ("big", 8, False)]
    dag_a, dag_b, task_ay, task_bz = ("x.y", "x", "z", "y.z") if dotted else ("a", "b", "y", "z")
    tasks = {dag_a: [("x", "small", None, None), (task_ay, "mid", 3, None)],
             dag_b: [("x", "big", None, 2), (task_bz, "mid", 2 if dotted else None, None)]}
    runs = [(g + 1, dag_a if g < 5 else dag_b, f"r{g}", T0 + timedelta(seconds=g)) for g in range(10)]
    tis = []
    for g in range(n_tis):
        run_id, dag_id, run_name, run_after = runs[g % 10]
        task_id, pool, _, _ = tasks[dag_id][(g // 10) % 2]
        # preempt: every fourth TI arrives later (state none until a scheduler loop schedules it),
        # at priority 10, behind running lower-priority tries.
        late = preempt and g % 4 == 0
        tis.append({"run": run_id, "dag_id": dag_id, "run_id": run_name, "task_id": task_id, "map_index": g // 10,
                    "pw": 10 if late else 1 + (g * 7) % 5, "pool": pool, "ps": 1 + g % 3, "run_after": run_after,
                    "state": "none" if late else "scheduled"})
    with eng.begin() as c:
        reset(c)
        c.execute(sa.text("INSERT INTO executor (name, parallelism) VALUES ('default', 12)"))
        c.execute(sa.text("INSERT INTO pool (name, slots, include_deferred) VALUES (:n, :s, :i)"),
                  [{"n": n, "s": s, "i": i} for n, s, i in pools])
        c.execute(sa.text("INSERT INTO dag (dag_id, fileloc, max_active_tasks) VALUES (:d, 'race', :m)"),
                  [{"d": dag_a, "m": 4}, {"d": dag_b, "m": None}])
        c.execute(sa.text("INSERT INTO task (dag_id, task_id, kind, pool, max_active_tis_per_dag, "
                          "max_active_tis_per_dagrun) VALUES (:d, :t, 'bash', :p, :a, :b)"),
                  [{"d": d, "t": t, "p": p, "a": a, "b": b} for d, ts in tasks.items() for t, p, a, b in ts])
        c.execute(sa.text("INSERT INTO dag_run (id, dag_id, run_id, run_type, state, run_after, created_at) "
                          "VALUES (:id, :d, :r, 'manual', 'running', :a, :a)"),
                  [{"id": i, "d": d, "r": r, "a": a} for i, d, r, a in runs])
        if preempt:  # every pool but default_pool preemptible, margin 1; every task preemptible
            c.execute(sa.text("UPDATE pool SET preempt_margin = 1 WHERE name <> 'default_pool'"))
            c.execute(sa.text("UPDATE task SET preemptible = :t"), {"t": True})
        c.execute(sa.text("INSERT INTO task_instance (dag_run_id, dag_id, run_id, task_id, map_index, state, "
                          "priority_weight, pool, pool_slots, queue, executor, run_after) "
                          "VALUES (:run, :dag_id, :run_id, :task_id, :map_index, :state, :pw, :pool, :ps, "
                          "'default', 'default', :run_after)"), tis)


def session_engine(url: str, session_sql: str = ""):
    """An engine whose every new connection runs session_sql first (a session setting)."""
    eng = db.make_engine(url)
    if session_sql:
        @sa.event.listens_for(eng, "connect")
        def _session(dbapi_conn, _record):
            with dbapi_conn.cursor() as cur:
                cur.execute(session_sql)
    return eng


def scheduler_loop(url: str, window: Window, seed: int, out, version: int | None = None,
                   preempt: bool = False, pins: str = "", session_sql: str = "") -> None:
    """Call queue_tis_v<version> (None: the named query) in a loop (and the named query
    preempt after it). pins: procedure_versions for the named queries ("preempt=1").
    session_sql: a statement every new connection runs first (a session setting)."""
    from engine import calls
    eng = calls.pin(session_engine(url, session_sql), pins) if pins else session_engine(url, session_sql)
    rng = random.Random(seed)
    queued, busy, violations, preempted, deadlocks = [], 0, [], 0, 0
    while window.racing():
        try:
            with eng.begin() as c:
                queued += [r.ti_id for r in call_queue_tis(c, version, max_tis=rng.randint(1, 10), job_id=seed,
                                                           now=None)]
        except sa.exc.DBAPIError as exc:
            if not db.is_lock_busy(exc):
                raise
            busy += 1
        if preempt and rng.random() < 0.3:
            with eng.begin() as c:  # a high-priority TI arrives, now and then (LATE_WHERE_PREEMPTION_CAN_HAPPEN)
                late = c.execute(LATE_WHERE_PREEMPTION_CAN_HAPPEN).scalar()
                if late is None and rng.random() < 0.1:
                    late = c.execute(sa.text("SELECT min(id) FROM task_instance WHERE state = 'none'")).scalar()
                c.execute(sa.text("UPDATE task_instance SET state = 'scheduled' WHERE id = :i AND state = 'none'"),
                          {"i": late})
        if preempt:
            try:
                with db.connect(eng) as c:
                    preempted += len(db.run(c, "preempt", now=None, cooldown=0, max_per_pass=rng.randint(1, 3),
                                            min_runtime=0).all())
            except sa.exc.DBAPIError as exc:
                if not transient(exc):
                    raise
                busy += 1
                deadlocks += deadlock(exc)
        with eng.connect() as c:
            violations += [tuple(r) for r in c.execute(VIOLATIONS)]
    eng.dispose()
    out.put({"queued": queued, "busy": busy, "violations": violations, "preempted": preempted,
             "deadlocks": deadlocks})


def completer_loop(url: str, window: Window, seed: int, out, preempt: bool = False) -> None:
    eng = db.make_engine(url)
    rng = random.Random(seed)
    running, finished, violations, claimed, deadlocks = [], 0, [], [], 0
    until = {}  # (ti_id, try_number) -> when its try may end
    job_id = None
    if preempt:
        with db.connect(eng) as c:
            job_id = db.run(c, "register_job", kind="worker", hostname=f"c{seed}", pid=seed).scalar_one()
    while window.racing():
        if preempt:  # as a worker: heartbeat, stop what the database says to stop
            try:
                with db.connect(eng) as c:
                    rows = db.run(c, "worker_heartbeat", job_id=job_id, now=None,
                                  running=json.dumps([[r.ti_id, r.try_number] for r in running])).all()
            except sa.exc.DBAPIError as exc:
                if not transient(exc):
                    raise
                deadlocks += deadlock(exc)
                rows = []  # as Worker._beat: the next heartbeat tells
            stop = {(r.ti_id, r.try_number) for r in rows if r.ti_id is not None}
            running = [r for r in running if (r.ti_id, r.try_number) not in stop]
        with db.connect(eng) as c:
            new = db.run(c, "claim_tis", job_id=job_id, hostname=f"c{seed}", queues=["default"],
                         limit=rng.randint(1, 4), log_dir="/tmp", now=None).all()
        running += new
        claimed += [(r.ti_id, r.try_number) for r in new]
        now = time.monotonic()
        for r in new:  # a try runs for a while (HOLD), so that pools fill with running, outranked tries
            until[(r.ti_id, r.try_number)] = now + (rng.random() * HOLD if preempt else 0.0)
        rng.shuffle(running)
        done = [r for r in running if until[(r.ti_id, r.try_number)] <= now]
        for ti in done[: rng.randint(0, len(done))]:
            try:
                with db.connect(eng) as c:
                    db.run(c, "finish_ti", ti_id=ti.ti_id, try_number=ti.try_number, exit_code=0, timed_out=False,
                           reason=None, now=None)
            except sa.exc.DBAPIError as exc:
                if not transient(exc):
                    raise
                deadlocks += deadlock(exc)
                continue  # as Worker: the report stays unsent and goes again at the next pass
            running.remove(ti)
            finished += 1
        with eng.connect() as c:
            violations += [tuple(r) for r in c.execute(VIOLATIONS)]
        time.sleep(rng.random() * 0.01)
    eng.dispose()
    out.put({"finished": finished, "violations": violations, "claimed": claimed, "deadlocks": deadlocks})


def race(url: str, seconds: float, schedulers: int = 4, completers: int = 2, versions=(None,),
         preempt: bool = False, enough: str | None = None, pins: str = "", session_sql: str = "") -> dict:
    """versions: the queue_tis version of each scheduler, in turn (None: the named query).
    enough: a SQL condition the race runs until (after `seconds`), see Window.run.
    pins: procedure_versions of the schedulers' named queries (e.g. "preempt=1").
    session_sql: a statement each scheduler's connections run first."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out, window = ctx.Queue(), Window(ctx)
    procs = [ctx.Process(target=scheduler_loop,
                         args=(url, window, i + 1, out, versions[i % len(versions)], preempt, pins, session_sql))
             for i in range(schedulers)]
    procs += [ctx.Process(target=completer_loop, args=(url, window, 100 + i, out, preempt)) for i in range(completers)]
    results = window.run(url, procs, out, seconds, enough)
    queued = [i for r in results for i in r.get("queued", [])]
    claimed = [i for r in results for i in r.get("claimed", [])]
    return {
        "queued": len(queued),
        "distinct_queued": len(set(queued)),
        "busy": sum(r.get("busy", 0) for r in results),
        "finished": sum(r.get("finished", 0) for r in results),
        "preempted": sum(r.get("preempted", 0) for r in results),
        "deadlocks": sum(r.get("deadlocks", 0) for r in results),
        "claimed": len(claimed),
        "distinct_claimed": len(set(claimed)),
        "violations": [v for r in results for v in r["violations"]],
        "exit_codes": [p.exitcode for p in procs],
    }
