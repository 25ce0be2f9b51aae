"""`engine demo`: the sample DAGs end to end, scheduler and worker in one process."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timezone

import click

from engine import db
from engine.dagsync import sync
from engine.errors import EngineError
from engine.executors import Dispatcher
from engine.paths import EXAMPLES_DIR
from engine.pools import set_pool
from engine.scheduler import Scheduler
from engine.table import table
from engine.worker import Worker


def run_demo(eng, cfg, timeout: float = 300, executor: str = "default") -> int:
    """With executor 'celery', the sample DAGs' PythonTasks run on Celery (a dispatcher in this
    process, an `engine celery-worker` child on celery_broker_url); their BashTasks on the
    database queue."""
    started = time.monotonic()
    transport = None
    if executor == "celery":
        from engine.celery import CeleryTransport

        transport = CeleryTransport(cfg)
        if not transport.ready():
            raise EngineError(f"the celery broker at {cfg.celery_broker_url} does not answer; start RabbitMQ "
                              "(rabbitmq-server -detached) or set celery_broker_url")
    with db.connect(eng) as conn:
        set_pool(conn, "demo_warehouse", 2, description="sample pool of engine demo")
    result = sync(eng, EXAMPLES_DIR, force=True)  # the engine's own examples, wherever it is installed
    click.echo(f"synced sample DAGs from {EXAMPLES_DIR}: {', '.join(result['synced'])}")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    run_ids = []
    with db.connect(eng) as conn:
        for dag_id in result["synced"]:
            db.run(conn, "dag_set_paused", dag_id=dag_id, paused=False)
            if executor != "default":
                db.run(conn, "tasks_set_executor", dag_id=dag_id, executor=executor)
            row = db.run(conn, "trigger_dag", dag_id=dag_id, run_id=f"demo__{stamp}",
                         conf='{"source": "engine demo"}', now=None).one()
            run_ids.append(row.dag_run_id)
    click.echo(f"triggered {len(run_ids)} run(s); running scheduler and worker (logs in {cfg.log_path})")

    scheduler, worker = Scheduler(eng, cfg), Worker(eng, cfg)
    worker.start()
    dispatcher = celery_worker = None
    if transport is not None:
        dispatcher = Dispatcher(eng, cfg, executor, transport)
        celery_worker = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "celery-worker", "--queues", "default", "--concurrency", "2"],
            env={**os.environ, "ENGINE_DATABASE_URL": eng.url.render_as_string(hide_password=False)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        click.echo(f"PythonTasks run on celery: dispatcher here, `engine celery-worker` pid {celery_worker.pid} "
                   f"on {cfg.celery_broker_url}")
    last = None
    rows = []
    try:
        while time.monotonic() - started < timeout:
            scheduler.run_once()
            worker.run_once()
            if dispatcher is not None:
                dispatcher.run_once()
            with db.connect(eng) as conn:
                rows = db.run(conn, "run_states", ids=run_ids).all()
            progress = "  ".join(f"{r.dag_id}: {r.success + r.failed + r.skipped}/{r.tis} done ({r.state})" for r in rows)
            if progress != last:
                click.echo(f"[{time.monotonic() - started:5.1f}s] {progress}")
                last = progress
            if all(r.state in ("success", "failed") for r in rows):
                break
            time.sleep(0.1)
    finally:
        worker.stop()
        scheduler.stop()
        if celery_worker is not None:
            celery_worker.terminate()
            try:
                celery_worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                celery_worker.kill()
                celery_worker.wait()
            transport.close()
    elapsed = time.monotonic() - started
    click.echo()
    click.echo(table([(r.dag_id, r.run_id, r.state, r.tis, r.success, r.skipped, r.failed, r.unfinished)
                       for r in rows], ["dag", "run", "state", "tis", "success", "skipped", "failed", "unfinished"]))
    ok = bool(rows) and all(r.state == "success" for r in rows)
    click.echo(f"\n{'all sample runs succeeded' if ok else 'some sample runs did not succeed'} in {elapsed:.1f}s; "
               f"see `engine status` and the task logs under {cfg.log_path}")
    return 0 if ok else 1
