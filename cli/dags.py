"""`engine dags ...`: DAG definitions, manual runs, backfills, tests, pause and drain."""
from __future__ import annotations

import json
import sys
import time

import click

from cli.common import Context, Date, Seconds, checked, handle_errors, pass_ctx, show
from engine import db, validate
from engine.errors import EngineError


@click.group()
def dags():
    """DAG definitions and runs."""


@dags.command("sync")
@click.argument("path", required=False)
@click.option("--force", is_flag=True, help="let a file take over a DAG id that another file defines")
@click.option("--check", is_flag=True, help="only parse and validate (for CI): write nothing, no database needed")
@pass_ctx
@handle_errors
def dags_sync(c: Context, path, force, check):
    """Parse the DAG files under PATH and store their definitions (all or nothing)."""
    from engine.dagbag import load_dags
    from engine.dagsync import check_in_folder, sync

    cfg = c.cfg()
    path = path or cfg.dags_folder
    check_in_folder(path, cfg.dags_folder)  # a path or file outside the DAGs folder: refused before any import
    dags = load_dags(path, timeout=cfg.dag_import_timeout)  # bad files fail here, before the database is touched
    if check:
        return click.echo(f"ok: {len(dags)} DAG(s) in {path}: {', '.join(d['dag_id'] for d in dags) or '-'}")
    result = sync(c.engine(), path, dags, force=force, paused_at_creation=cfg.dags_are_paused_at_creation,
                  dags_folder=cfg.dags_folder)
    click.echo(f"synced {len(result['synced'])} DAG(s): {', '.join(result['synced']) or '-'}"
               + (f"; deactivated: {', '.join(result['deactivated'])}" if result["deactivated"] else ""))


@dags.command("list")
@pass_ctx
@handle_errors
def dags_list(c: Context):
    """The stored DAGs."""
    with db.connect(c.engine()) as conn:
        show(db.run(conn, "dags_list"), "(no DAGs; run `engine dags sync PATH`)")


@dags.command("trigger")
@click.argument("dag_id", callback=checked("dag_id"))
@click.option("--conf", help="JSON object passed to the run")
@click.option("--run-id", callback=checked("run id", run_id=True), help="run id (default manual__<logical date>)")
@click.option("--logical-date", type=Date(), help="the run's logical date (ISO 8601, UTC without offset; default now)")
@pass_ctx
@handle_errors
def dags_trigger(c: Context, dag_id, conf, run_id, logical_date):
    """Create a manual run of DAG_ID."""
    parsed = validate.parse_json(conf, "--conf", "an object like '{\"k\": 1}'") if conf else {}
    if not isinstance(parsed, dict):
        raise EngineError("--conf must be a JSON object like '{\"k\": 1}'")
    with db.connect(c.engine()) as conn:
        row = db.run(conn, "trigger_run", dag_id=dag_id, run_id=run_id, conf=json.dumps(parsed),
                     logical_date=logical_date, now=None).one()
    click.echo(f"triggered {dag_id} run {row.run_id}")


@dags.command("backfill")
@click.argument("dag_id", callback=checked("dag_id"))
@click.option("--start", required=True, type=Date(), help="first logical date (ISO 8601; UTC without offset)")
@click.option("--end", required=True, type=Date(), help="last logical date, included")
@click.option("--max-active-runs", type=click.IntRange(1, 100_000),
              help="at most N backfill runs queued or running at once (default: all at once; the DAG's "
                   "max_active_runs still applies)")
@click.option("--rerun-failed", is_flag=True, help="clear the failed TIs of failed runs in the range and rerun them")
@click.option("--poll", type=Seconds(3600), default=2.0, show_default=True,
              help="with --max-active-runs: seconds between steps")
@pass_ctx
@handle_errors
def dags_backfill(c: Context, dag_id, start, end, max_active_runs, rerun_failed, poll):
    """Create the runs of DAG_ID's schedule from --start to --end (run_type backfill); a
    scheduler runs them. With --max-active-runs the command stays until every run is created."""
    first, total = True, {"created": 0, "rerun": 0}
    while True:
        with db.connect(c.engine()) as conn:
            row = db.run(conn, "backfill", dag_id=dag_id, start_date=start, end_date=end, max_active=max_active_runs,
                         rerun_failed=rerun_failed and first, now=None).one()
        first = False
        total["created"] += row.created
        total["rerun"] += row.rerun
        if row.created or row.rerun or not row.remaining:
            click.echo(f"backfill {dag_id}: {row.created} run(s) created, {row.rerun} failed run(s) rerun; "
                       f"{row.active} active, {row.remaining} waiting for a slot")
        if not row.remaining:
            break
        time.sleep(poll)
    click.echo(f"backfill {dag_id} {start.isoformat()} .. {end.isoformat()}: {total['created']} run(s) created, "
               f"{total['rerun']} rerun; see `engine runs list --dag {dag_id}`")


@dags.command("test")
@click.argument("dag_id", callback=checked("dag_id"))
@click.option("--logical-date", type=Date(), help="the run's logical date (default now)")
@click.option("--timeout", type=Seconds(86400), default=3600, show_default=True, help="give up after this many seconds")
@pass_ctx
@handle_errors
def dags_test(c: Context, dag_id, logical_date, timeout):
    """Run DAG_ID once, from this process (a scheduler and a worker pass in a loop, no services
    needed), printing each task's log as its try ends; exit 0 when the run succeeds."""
    from engine.testing import test_dag

    sys.exit(test_dag(c.engine(), c.cfg(), dag_id, logical_date, timeout))


def update_dag(c: Context, query: str, dag_id: str, **params) -> None:
    """Run a named statement that updates one active DAG (it returns the dag_id it changed)."""
    with db.connect(c.engine()) as conn:
        found = db.run(conn, query, dag_id=dag_id, **params).first()
    if not found:
        raise EngineError(f"unknown DAG {dag_id!r}; see `engine dags list`")


def _set_paused(c: Context, dag_id: str, paused: bool) -> None:
    update_dag(c, "dag_set_paused", dag_id, paused=paused)
    click.echo(f"{dag_id} {'paused' if paused else 'unpaused'}")


@dags.command("pause")
@click.argument("dag_id", callback=checked("dag_id"))
@pass_ctx
@handle_errors
def dags_pause(c: Context, dag_id):
    """Start no new runs or TIs of DAG_ID (running TIs finish)."""
    _set_paused(c, dag_id, True)


@dags.command("unpause")
@click.argument("dag_id", callback=checked("dag_id"))
@pass_ctx
@handle_errors
def dags_unpause(c: Context, dag_id):
    """Resume DAG_ID."""
    _set_paused(c, dag_id, False)


def _set_dag_draining(c: Context, dag_id: str, draining: bool) -> None:
    update_dag(c, "dag_set_draining", dag_id, draining=draining)


@dags.command("drain")
@click.argument("dag_id", callback=checked("dag_id"))
@pass_ctx
@handle_errors
def dags_drain(c: Context, dag_id):
    """Admit nothing new for DAG_ID; running and deferred TIs finish (see `engine drain --status`)."""
    _set_dag_draining(c, dag_id, True)
    click.echo(f"{dag_id} draining: no new runs or TIs start; running and deferred TIs finish "
               f"(`engine drain --status`; `engine undrain {dag_id}` ends it)")


@dags.command("undrain")
@click.argument("dag_id", callback=checked("dag_id"))
@pass_ctx
@handle_errors
def dags_undrain(c: Context, dag_id):
    """End the drain of DAG_ID (same as `engine undrain DAG_ID`)."""
    end_drain(c, dag_id)


def end_drain(c: Context, dag_id: str | None) -> None:
    """End the drain of DAG_ID, or (None) of the deployment and every DAG."""
    if dag_id is None:
        with db.connect(c.engine()) as conn:
            db.run(conn, "deployment_set_draining", draining=False)
        click.echo("drain ended: the deployment and every DAG admit work again")
        return
    _set_dag_draining(c, dag_id, False)
    with db.connect(c.engine()) as conn:
        still = any(f.scope == "deployment" for f in db.run(conn, "drain_flags"))
    click.echo(f"{dag_id} no longer draining" + ("; the whole deployment still drains (`engine undrain`)" if still else ""))
