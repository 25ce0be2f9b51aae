"""`engine tasks ...`: list TIs and their state; clear, mark or kill them; test a task. Every
change goes through a stored function (clear_tis_v1, set_ti_state_v1); this module prints."""
from __future__ import annotations

import re
import sys

import click

from cli.common import Context, checked, emit, handle_errors, pass_ctx
from cli.runs import reason_option, require_run
from engine import db, validate
from engine.errors import EngineError
from engine.table import table

TI_STATES = ["none", "scheduled", "queued", "running", "restarting", "success", "failed", "up_for_retry",
             "upstream_failed", "skipped", "deferred", "removed"]

map_index_option = click.option("--map-index", type=click.IntRange(-1, validate.MAX_MAP_LENGTH),
                                 help="one mapped instance (default: every map index)")


@click.group()
def tasks():
    """Task instances: list, state, clear, mark, kill, test."""


@tasks.command("list")
@click.argument("dag_id", callback=checked("dag_id"))
@click.argument("run_id", callback=checked("run id", run_id=True))
@click.option("--state", type=click.Choice(TI_STATES), help="only TIs in this state")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@pass_ctx
@handle_errors
def tasks_list(c: Context, dag_id, run_id, state, as_json):
    """The TIs of run RUN_ID of DAG_ID: state, try, duration, host, reason (view ti_overview)."""
    with db.connect(c.engine()) as conn:
        require_run(conn, dag_id, run_id)
        emit(db.run(conn, "tis_list", dag_id=dag_id, run_id=run_id, task_id=None, map_index=None, state=state),
             as_json, "(no TIs)")


@tasks.command("state")
@click.argument("dag_id", callback=checked("dag_id"))
@click.argument("run_id", callback=checked("run id", run_id=True))
@click.argument("task_id", callback=checked("task_id"))
@map_index_option
@click.option("--json", "as_json", is_flag=True, help="print JSON (every column)")
@pass_ctx
@handle_errors
def tasks_state(c: Context, dag_id, run_id, task_id, map_index, as_json):
    """The state of TASK_ID in run RUN_ID (one word; a table for a mapped task)."""
    with db.connect(c.engine()) as conn:
        require_run(conn, dag_id, run_id)
        result = db.run(conn, "tis_list", dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index,
                        state=None)
        if as_json:
            rows = emit(result, True)
        else:
            rows = result.all()
            if len(rows) == 1:
                click.echo(rows[0].state)
            elif rows:
                click.echo(table([(r.map_index, r.state, r.try_number) for r in rows], ["map_index", "state", "try"]))
    if not rows:
        raise EngineError(f"run {run_id!r} of DAG {dag_id!r} has no TI of task {task_id!r}"
                          + (f" with map index {map_index}" if map_index is not None else "")
                          + f"; see `engine tasks list {dag_id} {run_id}`")


@tasks.command("clear")
@click.argument("dag_id", callback=checked("dag_id"))
@click.option("--run", "run_id", callback=checked("run id", run_id=True), help="only this run (default: every run)")
@click.option("--task", "task_regex", help="tasks whose id matches this regular expression (searched)")
@click.option("--downstream", is_flag=True, help="also every task downstream of the matched ones")
@click.option("--upstream", is_flag=True, help="also every task upstream of the matched ones")
@click.option("--only-failed", is_flag=True, help="only failed and upstream_failed TIs")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@reason_option
@pass_ctx
@handle_errors
def tasks_clear(c: Context, dag_id, run_id, task_regex, downstream, upstream, only_failed, yes, reason):
    """Clear TIs of DAG_ID so they run again with a new try; their runs go back to running.
    A running TI is stopped first (its worker ends the try within a heartbeat). Shows what it
    will clear and asks unless --yes."""
    if task_regex is not None:
        validate.check_text(task_regex, "--task", allow_empty=False)
        try:
            re.compile(task_regex)
        except re.error as exc:
            raise EngineError(f"--task {task_regex!r} is not a regular expression ({exc}); e.g. --task '^load'")
    if reason is not None:
        validate.check_text(reason, "--reason")
    params = dict(dag_id=dag_id, run_id=run_id, task_regex=task_regex, downstream=downstream, upstream=upstream,
                  only_failed=only_failed, reason=reason, now=None)
    with db.connect(c.engine()) as conn:
        preview = db.run(conn, "clear_tis", dry_run=True, **params).all()
    if not preview:
        click.echo("nothing to clear")
        return
    show = lambda rows: click.echo(table([(r.run_id, r.task_id, r.map_index, r.state, r.new_state) for r in rows],
                                         ["run_id", "task_id", "map_index", "state", "becomes"]))
    show(preview)
    if not yes and not sys.stdin.isatty():
        raise EngineError(f"would clear {len(preview)} TI(s); pass --yes to clear without a terminal to confirm")
    while True:
        if not yes:
            click.confirm(f"clear these {len(preview)} TI(s)?", abort=True)
        # The clear is what was confirmed, or nothing: in the same transaction as the clear, the
        # TIs it changed (and the states they had) must be the ones shown; else it is rolled back
        # and the new list is shown and asked for again (the services went on while the prompt
        # waited: a TI started, ended or appeared).
        def clear(conn):
            rows = db.run(conn, "clear_tis", dry_run=False, **params).all()
            if not (yes or _clear_key(rows) == _clear_key(preview)):
                raise _NotAsShown(rows)
            return rows
        try:   # (a deadlock runs the clear again: db.in_transaction)
            done = db.in_transaction(c.engine(), clear)
            break
        except _NotAsShown as exc:
            done = exc.rows   # (rolled back)
        if not done:
            click.echo("nothing to clear any more (the TIs shown changed meanwhile)")
            return
        click.echo("the TIs to clear changed while the prompt waited; now:")
        preview = done
        show(preview)
    stopping = sum(1 for r in done if r.new_state == "restarting")
    click.echo(f"cleared {len(done)} TI(s) in {len({r.run_id for r in done})} run(s)"
               + (f"; {stopping} running tr{'y is' if stopping == 1 else 'ies are'} being stopped by "
                  f"{'its worker' if stopping == 1 else 'their workers'} first" if stopping else ""))


class _NotAsShown(Exception):
    """A clear that would change other TIs than the ones confirmed: its transaction rolls back."""

    def __init__(self, rows):
        super().__init__()
        self.rows = rows


def _clear_key(rows) -> list:
    """What a clear_tis result is, to compare a clear with its preview: each TI, its state and the
    state it gets."""
    return sorted((r.ti_id, r.state, r.new_state) for r in rows)


def _set_ti_state(c: Context, dag_id, run_id, task_id, map_index, new_state: str, action: str, reason) -> None:
    if reason is not None:
        validate.check_text(reason, "--reason")
    rows = db.in_transaction(c.engine(), lambda conn: db.run(
        conn, "set_ti_state", dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index,
        new_state=new_state, action=action, reason=reason, now=None).all())
    for r in rows:
        where = f"{task_id}" + (f"[{r.map_index}]" if r.map_index >= 0 else "")
        stopped = " (its worker stops the running try)" if r.state in ("running", "restarting") else ""
        click.echo(f"{dag_id} {run_id} {where}: {r.state} -> {r.new_state}{stopped}")


@tasks.command("mark")
@click.argument("state", type=click.Choice(["success", "failed"]))
@click.argument("dag_id", callback=checked("dag_id"))
@click.argument("run_id", callback=checked("run id", run_id=True))
@click.argument("task_id", callback=checked("task_id"))
@map_index_option
@reason_option
@pass_ctx
@handle_errors
def tasks_mark(c: Context, state, dag_id, run_id, task_id, map_index, reason):
    """Mark TASK_ID in run RUN_ID success or failed (a running try is stopped by its worker)."""
    _set_ti_state(c, dag_id, run_id, task_id, map_index, state, f"mark_{state}", reason)


@tasks.command("kill")
@click.argument("dag_id", callback=checked("dag_id"))
@click.argument("run_id", callback=checked("run id", run_id=True))
@click.argument("task_id", callback=checked("task_id"))
@map_index_option
@reason_option
@pass_ctx
@handle_errors
def tasks_kill(c: Context, dag_id, run_id, task_id, map_index, reason):
    """Fail the unfinished TIs of TASK_ID in run RUN_ID: a running try is stopped by its worker
    (SIGTERM, then SIGKILL after the grace); a queued or scheduled one never starts."""
    _set_ti_state(c, dag_id, run_id, task_id, map_index, "failed", "kill", reason)


@tasks.command("test")
@click.argument("dag_id", callback=checked("dag_id"))
@click.argument("task_id", callback=checked("task_id"))
@click.option("--map-index", type=click.IntRange(0, validate.MAX_MAP_LENGTH), help="which mapped instance")
@pass_ctx
@handle_errors
def tasks_test(c: Context, dag_id, task_id, map_index):
    """Run TASK_ID of DAG_ID once in the foreground, as a worker would, printing its log; no
    dependency check and nothing recorded in the database (Airflow's `tasks test`). Exits with
    the task's exit code."""
    from engine.testing import test_task

    sys.exit(test_task(c.engine(), c.cfg(), dag_id, task_id, map_index))
