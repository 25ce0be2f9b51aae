"""`engine runs ...`: list and inspect dag runs; mark them success or failed, cancel them.
Every change goes through a stored function (set_run_state_v1); this module prints."""
from __future__ import annotations

import json

import click

from cli.common import Context, checked, emit, handle_errors, json_default, pass_ctx, plain
from engine import db, validate
from engine.errors import EngineError
from engine.table import table

RUN_STATES = ["queued", "running", "success", "failed"]


@click.group()
def runs():
    """Dag runs: list, show, mark success or failed, cancel."""


def require_run(conn, dag_id: str, run_id: str):
    """The run_overview row of (dag_id, run_id), or a one-line error naming what is unknown."""
    row = db.run(conn, "run_get", dag_id=dag_id, run_id=run_id).first()
    if row is None:
        if db.run(conn, "dag_exists", dag_id=dag_id).first() is None:
            raise EngineError(f"unknown DAG {dag_id!r}; see `engine dags list`")
        raise EngineError(f"DAG {dag_id!r} has no run {run_id!r}; see `engine runs list --dag {dag_id}`")
    return row


def reason_option(fn):
    return click.option("--reason", help="why (recorded with the change; default: the action by an operator)")(fn)


@runs.command("list")
@click.option("--dag", "dag_id", callback=checked("dag_id"), help="only this DAG's runs")
@click.option("--state", type=click.Choice(RUN_STATES), help="only runs in this state")
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True, help="newest N runs")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@pass_ctx
@handle_errors
def runs_list(c: Context, dag_id, state, limit, as_json):
    """Dag runs, newest first, with their TIs counted by state (view run_overview)."""
    with db.connect(c.engine()) as conn:
        if dag_id and db.run(conn, "dag_exists", dag_id=dag_id).first() is None:
            raise EngineError(f"unknown DAG {dag_id!r}; see `engine dags list`")
        emit(db.run(conn, "runs_list", dag_id=dag_id, state=state, limit=limit), as_json, "(no runs)")


@runs.command("show")
@click.argument("dag_id", callback=checked("dag_id"))
@click.argument("run_id", callback=checked("run id", run_id=True))
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@pass_ctx
@handle_errors
def runs_show(c: Context, dag_id, run_id, as_json):
    """One run: its state, its TIs (state, try, duration, host, reason) and what operators changed."""
    with db.connect(c.engine()) as conn:
        run = require_run(conn, dag_id, run_id)
        tis = db.run(conn, "tis_list", dag_id=dag_id, run_id=run_id, task_id=None, map_index=None, state=None)
        ti_keys, ti_rows = list(tis.keys()), tis.all()
        changes = db.run(conn, "state_changes", dag_id=dag_id, run_id=run_id)
        ch_keys, ch_rows = list(changes.keys()), changes.all()
    if as_json:
        click.echo(json.dumps({"run": dict(run._mapping), "tis": [dict(zip(ti_keys, r)) for r in ti_rows],
                               "changes": [dict(zip(ch_keys, r)) for r in ch_rows]}, default=json_default, indent=2))
        return
    m = run._mapping
    click.echo(f"run {run_id} of {dag_id}: {m['state']} ({m['run_type']}, logical date {m['logical_date']}, "
               f"started {m['start_date'] or '-'}, ended {m['end_date'] or '-'})"
               + (f"; reason: {m['reason']}" if m["reason"] else ""))
    shown = ["task_id", "map_index", "state", "try_number", "duration_s", "hostname", "reason"]
    idx = [ti_keys.index(k) for k in shown]
    click.echo(table([[plain(r[i]) for i in idx] for r in ti_rows], shown) if ti_rows else "(no TIs yet)")
    if ch_rows:
        click.echo("\n== changes by operators")
        click.echo(table(ch_rows, ch_keys))


def _set_run_state(c: Context, dag_id: str, run_id: str, action: str, reason: str | None) -> None:
    if reason is not None:
        validate.check_text(reason, "--reason")
    row = db.in_transaction(c.engine(), lambda conn: db.run(
        conn, "set_run_state", dag_id=dag_id, run_id=run_id, action=action, reason=reason, now=None).one())
    stopped = (f"; {row.tries_stopped} running or deferred tr{'y' if row.tries_stopped == 1 else 'ies'} "
               f"stopped (their workers end the processes within a heartbeat)") if row.tries_stopped else ""
    click.echo(f"run {run_id} of {dag_id}: {row.state}; {row.tis_changed} unfinished TI(s) changed{stopped}")


@runs.command("mark")
@click.argument("state", type=click.Choice(["success", "failed"]))
@click.argument("dag_id", callback=checked("dag_id"))
@click.argument("run_id", callback=checked("run id", run_id=True))
@reason_option
@pass_ctx
@handle_errors
def runs_mark(c: Context, state, dag_id, run_id, reason):
    """Mark run RUN_ID of DAG_ID success or failed. success: its unfinished TIs become success.
    failed: running TIs are stopped and failed, TIs not started yet skipped."""
    _set_run_state(c, dag_id, run_id, f"mark_{state}", reason)


@runs.command("cancel")
@click.argument("dag_id", callback=checked("dag_id"))
@click.argument("run_id", callback=checked("run id", run_id=True))
@reason_option
@pass_ctx
@handle_errors
def runs_cancel(c: Context, dag_id, run_id, reason):
    """Cancel a queued or running run: running tries are stopped by their workers (SIGTERM, then
    SIGKILL after the grace) and fail, TIs not started never start (skipped); the run fails."""
    _set_run_state(c, dag_id, run_id, "cancel", reason)
