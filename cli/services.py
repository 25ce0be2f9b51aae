"""`engine tick`, `scheduler`, `worker`, `triggerer`: the long-running services (and one pass)."""
from __future__ import annotations

import json
import sys

import click

from cli.common import Context, handle_errors, pass_ctx
from engine import validate
from engine.errors import EngineError


@click.command()
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
@pass_ctx
@handle_errors
def tick(c: Context, as_json):
    """One scheduling pass (for cron or a systemd timer), then exit."""
    from engine.scheduler import Scheduler, format_summary

    sched = Scheduler(c.engine(light=True), c.cfg())
    try:
        summary = sched.run_once()
    finally:
        sched.stop()
    click.echo(json.dumps(summary) if as_json else format_summary(summary))
    if summary["errors"]:  # the other steps ran; say which failed, and exit non-zero for cron's mail
        for e in summary["errors"]:
            click.echo(f"error: step {e['step']} failed: {e['error']}", err=True)
        sys.exit(1)


METRICS_PORT = click.option("--metrics-port", type=click.IntRange(0, 65535),
                            help="serve Prometheus /metrics here (default: metrics_port)")


@click.command()
@click.option("--max-ticks", type=click.IntRange(1), help="stop after this many passes")
@METRICS_PORT
@pass_ctx
@handle_errors
def scheduler(c: Context, max_ticks, metrics_port):
    """Tick in a loop until SIGTERM."""
    from engine import metrics
    from engine.scheduler import Scheduler

    sched = Scheduler(c.engine(), c.cfg(metrics_port=metrics_port))
    metrics.serve(c.cfg(), c.engine(), sched.job, "scheduler")
    sched.loop(max_ticks=max_ticks)


@click.command()
@click.option("--queues", help="comma-separated queues (default: worker_queues)")
@click.option("--concurrency", type=click.IntRange(1, 10_000), help="tasks run at once (default: worker_concurrency)")
@click.option("--burst", is_flag=True, help="exit when nothing is queued or running")
@METRICS_PORT
@pass_ctx
@handle_errors
def worker(c: Context, queues, concurrency, burst, metrics_port):
    """Claim queued TIs and run them in subprocesses."""
    from engine import metrics
    from engine.worker import Worker

    cfg = c.cfg(metrics_port=metrics_port)
    given = cfg.worker_queues if queues is None else queues  # --queues '' is refused below, like ',,'
    qs = [validate.check_id(q.strip(), "queue", "--queues") for q in given.split(",") if q.strip()]
    if not qs:
        raise EngineError("--queues names no queue; pass e.g. --queues default")
    w = Worker(c.engine(), cfg, queues=qs, concurrency=concurrency)
    metrics.serve(cfg, c.engine(), w.job, "worker")
    w.loop(burst=burst)


@click.command()
@click.option("--capacity", type=click.IntRange(1, 1_000_000), help="triggers run at once (default: triggerer_capacity)")
@METRICS_PORT
@pass_ctx
@handle_errors
def triggerer(c: Context, capacity, metrics_port):
    """Run the triggers of deferred TIs (asyncio) until SIGTERM."""
    from engine import metrics
    from engine.triggerer import Triggerer

    t = Triggerer(c.engine(), c.cfg(metrics_port=metrics_port), capacity=capacity)
    metrics.serve(c.cfg(), c.engine(), t.job, "triggerer")
    t.run()
