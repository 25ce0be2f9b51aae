"""Operations commands: `engine db clean` (retention), `engine status --check` helpers,
`engine metrics`, `engine db url` / `engine db shell`. Registered on the groups of cli/main.py
by :func:`register`; like every command, thin wrappers over stored functions and views."""
from __future__ import annotations

import functools
import importlib
import json

import click

from engine import retention, validate


def _main():
    """cli.main, imported when first needed: cli/main.py imports this module at its end, so
    importing it back at import time would be circular (and, under `python -m cli.main`, the
    running module is __main__, not cli.main)."""
    return importlib.import_module("cli.main")


def handle_errors(fn):
    """cli.main.handle_errors: one line on stderr and exit 1 for bad input and database errors."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return _main().handle_errors(fn)(*args, **kwargs)
    return wrapper


def table(rows, headers) -> str:
    return _main().table(rows, headers)


pass_ctx = click.pass_obj  # the cli.main.Context of the `engine` group


@click.command("clean")
@click.option("--older-than", "older_than", help="age of the rows to delete, e.g. 30d, 12h (default: retention_days)")
@click.option("--table", "table_name", type=click.Choice(retention.TABLES), help="clean only this table")
@click.option("--dry-run", is_flag=True, help="count what would be deleted, delete nothing")
@click.option("--batch", type=click.IntRange(1, 100_000), help="rows per table per transaction (default: clean_batch)")
@click.option("--json", "as_json", is_flag=True, help="print the counts as JSON")
@pass_ctx
@handle_errors
def db_clean(c, older_than, table_name, dry_run, batch, as_json):
    """Delete finished runs (with their TIs), tries, fired triggers, ended jobs and tick_log rows
    older than --older-than, in batches; never anything a live run or job still needs."""
    cfg = c.cfg()
    seconds = validate.parse_age(older_than, "--older-than") if older_than else cfg.retention_days * 86400
    result = retention.clean(c.engine(), seconds, table=table_name, batch=batch or cfg.clean_batch, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "older_than_s": seconds, **result}))
        return
    verb = "would delete" if dry_run else "deleted"
    click.echo(table([(t, n) for t, n in result["tables"].items()], ["table", verb]))
    click.echo(f"{verb} {sum(result['tables'].values())} row(s) older than {seconds / 86400:g} day(s) "
               f"in {result['calls']} call(s) of clean_v1")


def status_check(c, as_json: bool, max_queued_age: float | None) -> None:
    """`engine status --check`: the named query health_check decides; exit 0 when it finds no
    problem, 2 with one line per problem (1 stays "could not check": bad input, database down)."""
    from engine import db

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


@click.command("metrics")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per sample instead of Prometheus' text format")
@pass_ctx
@handle_errors
def metrics_cmd(c, as_json):
    """Print the metrics the database knows once (Prometheus text format), for cron users."""
    from engine import metrics

    if not as_json:
        click.echo(metrics.text_once(c.engine()), nl=False)
        return
    for r in metrics.database_samples(c.engine()):
        labels = {k: getattr(r, k) for k in metrics.LABELS if getattr(r, k) is not None}
        click.echo(json.dumps({"metric": metrics.PREFIX + r.metric, "labels": labels, "value": float(r.value or 0)}))


def register(main: click.Group) -> None:
    """Add the commands of this module to the groups of `engine`."""
    main.commands["db"].add_command(db_clean)
    main.add_command(metrics_cmd)
