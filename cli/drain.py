"""`engine drain` / `engine undrain`: admit nothing new while in-flight work finishes."""
from __future__ import annotations

import click

from cli.common import Context, checked, handle_errors, pass_ctx
from cli.dags import end_drain
from engine import db
from engine.table import table


@click.command()
@click.option("--status", "show_status", is_flag=True, help="only report what is still in flight")
@pass_ctx
@handle_errors
def drain(c: Context, show_status):
    """Drain the whole deployment: admit nothing new; running and deferred TIs finish."""
    if not show_status:
        with db.connect(c.engine()) as conn:
            db.run(conn, "deployment_set_draining", draining=True)
        click.echo("deployment draining: no new runs or TIs start; running and deferred TIs finish "
                   "(`engine drain --status`; `engine undrain` ends it)")
        return
    with db.connect(c.engine()) as conn:
        flags = db.run(conn, "drain_flags").all()
        result = db.run(conn, "drain_status")
        keys, rows = list(result.keys()), result.all()
    if not flags:
        click.echo("not draining")
        return
    what = ["deployment" + (f" (since {f.since})" if f.since else "") for f in flags if f.scope == "deployment"]
    dags_ = [f.dag_id for f in flags if f.scope == "dag"]
    click.echo("draining: " + ", ".join(what + ([f"dags {', '.join(dags_)}"] if dags_ else [])))
    if not rows:
        click.echo("drained: nothing in flight")
        return
    click.echo(table(rows, keys))
    click.echo(f"{sum(sum(r[1:]) for r in rows)} TI(s) still in flight")


@click.command()
@click.argument("dag_id", required=False, callback=checked("dag_id"))
@pass_ctx
@handle_errors
def undrain(c: Context, dag_id):
    """End a drain: of DAG_ID, or (no argument) of the deployment and every DAG."""
    end_drain(c, dag_id)
