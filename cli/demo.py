"""`engine demo`: the sample DAGs end to end."""
from __future__ import annotations

import sys

import click
import sqlalchemy as sa

from cli.common import Context, Seconds, handle_errors, pass_ctx
from engine import db, migrate
from engine.errors import EngineError


@click.command()
@click.option("--timeout", type=Seconds(86400), default=300, show_default=True,
              help="give up after this many seconds")
@click.option("--executor", type=click.Choice(["default", "celery"]), default="default", show_default=True,
              help="celery: the sample DAGs' PythonTasks run on Celery (broker: celery_broker_url)")
@click.option("--database-url", help="database to run the demo on (same as `engine --database-url URL demo`)")
@pass_ctx
@handle_errors
def demo(c: Context, timeout, executor, database_url):
    """Sync the sample DAGs, trigger them and run scheduler and worker until every run ends.
    A database that is empty (or, on MySQL/MariaDB, missing) is created and migrated first."""
    from engine.demo import run_demo

    if database_url:
        c.cfg(database_url=database_url)
    eng = c.engine(migrated=False)
    created = db.ensure_database(eng)
    if created:
        click.echo(f"created {created}", err=True)
    try:
        current = migrate.current(eng)
    except sa.exc.OperationalError as exc:
        raise db.describe_connect_error(eng.url.render_as_string(hide_password=False), exc) from None
    if current is None:
        migrate.upgrade(eng)
        click.echo(f"migrated the empty database to revision {migrate.head()}", err=True)
    elif current != migrate.head():
        raise EngineError(f"database schema is at {current}, not {migrate.head()}; run `engine db upgrade`")
    sys.exit(run_demo(eng, c.cfg(), timeout=timeout, executor=executor))
