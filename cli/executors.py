"""`engine dispatcher`, `engine celery-worker`, `engine standalone`: the executors other than
the database queue's `engine worker` (docs/executors.md)."""
from __future__ import annotations

import os
import sys

import click

from cli.common import Context, handle_errors, pass_ctx
from engine import validate
from engine.errors import EngineError


def _queues(text: str) -> list[str]:
    qs = [validate.check_id(q.strip(), "queue", "--queues") for q in text.split(",") if q.strip()]
    if not qs:
        raise EngineError("--queues names no queue; pass e.g. --queues default")
    return qs


@click.command()
@click.option("--executor", type=click.Choice(["celery"]), default="celery", show_default=True,
              help="the executor whose queued TIs to send")
@click.option("--max-passes", type=click.IntRange(1), help="stop after this many passes")
@pass_ctx
@handle_errors
def dispatcher(c: Context, executor, max_passes):
    """Send queued TIs of an executor to its broker (one message per TI) until SIGTERM."""
    from engine.celery import CeleryTransport
    from engine.executors import Dispatcher

    cfg = c.cfg()
    Dispatcher(c.engine(), cfg, executor, CeleryTransport(cfg)).loop(max_passes=max_passes)


@click.command("celery-worker")
@click.option("--queues", help="comma-separated TI queues to consume (default: worker_queues)")
@click.option("--concurrency", type=click.IntRange(1, 10_000), help="tries run at once (default: worker_concurrency)")
@pass_ctx
@handle_errors
def celery_worker(c: Context, queues, concurrency):
    """A Celery worker of the celery executor (prefork, acks_late, prefetch 1) until SIGTERM."""
    cfg = c.cfg()
    qs = _queues(queues or cfg.worker_queues)
    c.engine()  # the schema must be at head: say so in one line now, not in every task
    # the pool processes read the settings again: give them what the options said
    if cfg.database_url:
        os.environ["ENGINE_DATABASE_URL"] = cfg.database_url
    if c.config_path:
        os.environ["ENGINE_CONFIG"] = c.config_path
    from engine.celery import make_app, queue_name, run_worker

    sys.exit(run_worker(make_app(cfg), ["worker", "-Q", ",".join(queue_name(cfg, q) for q in qs),
                                        "-c", str(concurrency or cfg.worker_concurrency),
                                        "-n", f"engine-{os.getpid()}@%h",
                                        "--loglevel", "INFO", "--without-gossip", "--without-mingle"]))


@click.command()
@click.option("--queues", help="comma-separated queues the worker claims from (default: worker_queues)")
@click.option("--concurrency", type=click.IntRange(1, 10_000), help="tasks run at once (default: worker_concurrency)")
@pass_ctx
@handle_errors
def standalone(c: Context, queues, concurrency):
    """Scheduler, triggerer and worker on this host in one command (the local executor)."""
    from engine import db, standalone as local

    cfg = c.cfg()
    c.engine()  # migrates the embedded database on first use; checks any other
    args = (["--queues", ",".join(_queues(queues))] if queues else []) + \
           (["--concurrency", str(concurrency)] if concurrency else [])
    sys.exit(local.run(db.resolve_url(cfg, announce=False), args, config_path=c.config_path))
