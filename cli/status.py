"""`engine status`: what the SQL views say, in one screen."""
from __future__ import annotations

import json

import click

from cli.common import Context, handle_errors, pass_ctx
from engine import db
from engine.table import table


@click.command()
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@handle_errors
def status(c: Context, as_json):
    """Pools, queue depth, running TIs, recent runs and live jobs, from the SQL views."""
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
