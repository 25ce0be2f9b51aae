"""Chaos for the celery executor: schedulers, a dispatcher and Celery workers (real processes on
a real broker) while kill -9 hits a Celery worker (with its pool: a lost host) and the
dispatcher, and the broker restarts; then the invariants of tests/cluster.py: every run ends
with success, no try executed twice, every try recorded once, no limit exceeded.
Used by tests/test_chaos.py (short) and loadtests/chaos.py --executor celery (long)."""
from __future__ import annotations

import os
import signal
import time

import sqlalchemy as sa

from tests.brokers import celery_env, delete_queues
from tests.cluster import CHAOS_POOL, CHAOS_POOL_SLOTS, HELD_TASK, Cluster, check_invariants, \
    chaos_dag_source, expected_run_ids, run_counts


def _wait(what, cond, seconds, cluster):
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > end:
            logs = "".join(f"\n--- {p.name} (exit code {p.popen.poll()}, None: still running)\n{p.log_text()[-2000:]}"
                           for p in cluster.procs)
            raise AssertionError(f"timed out waiting for {what}{logs}")
        time.sleep(0.2)


def _done(eng) -> int:
    with eng.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM task_instance WHERE state = 'success'")).scalar()


def _held_try_worker(eng, cluster, run_id: str):
    """The live celery-worker whose pool runs the held try (chaos_dag_source's hold) now: its job
    is a pool process of the worker's session. None until that try runs."""
    with eng.connect() as conn:
        pids = conn.execute(sa.text(
            "SELECT j.pid FROM task_instance ti JOIN job j ON j.id = ti.worker_job_id "
            "WHERE ti.state = 'running' AND j.state = 'running' AND ti.run_id = :run AND ti.task_id = :task "
            "AND ti.try_number = 1"), {"run": run_id, "task": HELD_TASK}).scalars().all()
    groups = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            pass
    return next((p for p in cluster.alive("celery-worker") if p.popen.pid in groups), None)


def run_celery_chaos(eng, db_url, workdir, broker_url: str, restart_broker, runs: int = 3, tasks: int = 5,
                     celery_workers: int = 2, seconds: float = 120, say=lambda msg: None) -> dict:
    from engine.dagsync import sync

    executions = workdir / "executions.txt"
    dags = workdir / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    # The first run's first try of HELD_TASK runs until its worker is killed (or this ends): the
    # kill below surely hits a running try, however fast the machine runs the others.
    release = workdir / "release-held-try"
    (dags / "chaos.py").write_text(chaos_dag_source(runs, tasks, executions, executor="celery", hold=release))
    with eng.begin() as conn:
        conn.execute(sa.text("INSERT INTO pool (name, slots) VALUES (:n, :s)"), {"n": CHAOS_POOL, "s": CHAOS_POOL_SLOTS})
    sync(eng, dags)
    env = celery_env("chaos", broker_url)
    cluster = Cluster(db_url, workdir, env=env)
    started = time.monotonic()
    step = lambda msg: say(f"{time.monotonic() - started:6.1f}s {msg}")
    try:
        for _ in range(2):
            cluster.start("scheduler")
        cluster.start("dispatcher")
        for _ in range(celery_workers):
            cluster.start("celery-worker", args=("--concurrency", "2"), new_session=True)
        # 1. kill -9 a Celery worker (and its pool) while it runs the held try; start another.
        found = []
        held_run = min(expected_run_ids(runs))
        _wait("the held try to run", lambda: found.append(_held_try_worker(eng, cluster, held_run)) or found[-1],
              90, cluster)
        victim = found[-1]
        os.killpg(victim.popen.pid, signal.SIGKILL)
        victim.popen.wait(timeout=10)
        victim.killed = True
        cluster.kills.append(victim.name)
        cluster.start("celery-worker", args=("--concurrency", "2"), new_session=True)
        step(f"kill -9 {victim.name} and its pool")
        # 2. kill -9 the dispatcher once more work has ended; start another.
        mark = _done(eng)
        _wait("progress", lambda: _done(eng) >= mark + 2, 90, cluster)
        [dispatcher] = cluster.alive("dispatcher")
        cluster.kill9(dispatcher)
        cluster.start("dispatcher")
        step("kill -9 the dispatcher")
        # 3. restart the broker in the middle.
        mark = _done(eng)
        _wait("progress", lambda: _done(eng) >= mark + 2, 90, cluster)
        restart_broker()
        step("broker restarted")
        # 4. every run ends.
        _wait("every run to end", lambda: sum(run_counts_of(eng).values()) >= runs
              and run_counts_of(eng)["running"] + run_counts_of(eng)["queued"] == 0,
              seconds, cluster)
        step(f"runs {dict(run_counts_of(eng))}")
    finally:
        release.touch()  # (a run that failed before the kill must not leave the held try waiting)
        codes = cluster.stop()
        delete_queues(broker_url, [env["ENGINE_CELERY_QUEUE_PREFIX"] + "default"])
    with eng.connect() as conn:
        report = check_invariants(conn, "chaos", expected_run_ids(runs), executions)
        dispatched = conn.execute(sa.text("SELECT count(*) FROM ti_dispatch")).scalar()
    report["invariants"]["stopped processes exit 0"] = [f"{n}: exit {c}" for n, c in codes.items() if c != 0]
    report["invariants"]["no message left in flight"] = [f"{dispatched} ti_dispatch rows"] if dispatched else []
    logs = [p.log_text() for p in cluster.procs if p.kind == "celery-worker"]
    stale = sum(text.count("): stale") for text in logs)
    restarts = sum(text.count("the Celery worker stopped on its own") for text in logs)
    report["counts"].update(stale_messages_dropped=stale, celery_workers_started_again=restarts,
                            seconds=round(time.monotonic() - started, 1), kills=cluster.kills,
                            processes=len(cluster.procs))
    return report


def run_counts_of(eng):
    with eng.connect() as conn:
        return run_counts(conn, "chaos")
