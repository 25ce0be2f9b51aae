"""`engine status`: what the SQL views say, in one screen."""
from __future__ import annotations

import json

import click

from cli.common import Context, Seconds, handle_errors, pass_ctx
from engine import db
from engine.table import table


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.option("--check", is_flag=True, help="health check: exit 0 when healthy, else 2 with one line per problem")
@click.option("--max-queued-age", type=Seconds(30 * 86400), help="--check: seconds the oldest queued TI may wait "
              "(default: health_max_queued_age)")
@pass_ctx
@handle_errors
def status(c: Context, as_json, check, max_queued_age):
    """Pools, queue depth, running TIs, recent runs and live jobs, from the SQL views."""
    if check:
        return status_check(c, as_json, max_queued_age)
    sections = [("dag errors", "status_dag_errors"), ("pools", "status_pools"), ("queues", "status_queues"), ("why pending", "status_pending"),
                ("running", "status_running"),
                ("recent runs", "status_runs"), ("live jobs", "status_jobs")]
    with db.connect(c.engine()) as conn:
        results = {title: db.run(conn, q) for title, q in sections}
        data = {title: (list(r.keys()), r.all()) for title, r in results.items()}
    if as_json:
        click.echo(json.dumps({t: [dict(zip(k, row)) for row in rows] for t, (k, rows) in data.items()},
                              default=str, indent=2))
        return
    for title, (keys, rows) in data.items():
        click.echo(f"== {title}")
        click.echo(table(rows, keys) if rows else "(none)")
        click.echo()


def status_check(c: Context, as_json: bool, max_queued_age: float | None) -> None:
    """`engine status --check`: the named query health_check decides; exit 0 when it finds no
    problem, 2 with one line per problem (1 stays "could not check": bad input, database down)."""
    cfg = c.cfg()
    with db.connect(c.engine()) as conn:
        problems = db.run(conn, "health_check", threshold=float(cfg.job_heartbeat_threshold),
                          max_queued_age=float(max_queued_age or cfg.health_max_queued_age)).all()
    if as_json:
        click.echo(json.dumps({"healthy": not problems, "problems": [dict(p._mapping) for p in problems]}))
    elif not problems:
        click.echo("healthy")
    for p in problems if not as_json else ():
        click.echo(f"{p.problem}: {p.detail}")
    if problems:
        raise SystemExit(2)
