"""`engine db ...`: schema and procedure versions, drift."""
from __future__ import annotations

import sys

import click

from cli.common import Context, handle_errors, pass_ctx
from engine import db, migrate, procedures
from engine.errors import EngineError
from engine.table import table


@click.group("db")
def db_group():
    """Schema and procedures."""


@db_group.command("upgrade")
@pass_ctx
@handle_errors
def db_upgrade(c: Context):
    """Migrate to the latest revision and repair drifted or missing procedures
    (on MySQL/MariaDB, create the database first when the server does not have it)."""
    eng = c.engine(migrated=False)
    if db.ensure_database(eng):
        click.echo(f"created database {eng.url.database}")
    repaired = migrate.upgrade(eng)
    click.echo(f"database at revision {migrate.current(eng)}" + (f"; reinstalled {', '.join(repaired)}" if repaired else ""))


@db_group.command("downgrade")
@click.argument("revision")
@pass_ctx
@handle_errors
def db_downgrade(c: Context, revision):
    """Migrate down to REVISION (`base` removes everything)."""
    eng = c.engine(migrated=False)
    migrate.downgrade(eng, revision)
    click.echo(f"database at revision {migrate.current(eng) or 'base'}")


@db_group.command("current")
@pass_ctx
@handle_errors
def db_current(c: Context):
    """Print the current revision."""
    click.echo(migrate.current(c.engine(migrated=False)) or "base (empty)")


@db_group.command("check")
@pass_ctx
@handle_errors
def db_check(c: Context):
    """List missing, drifted or outdated procedures; exit 1 if any."""
    eng = c.engine(migrated=False)
    if migrate.current(eng) is None:
        raise EngineError("the database has no engine schema yet; run `engine db upgrade`")
    with db.connect(eng) as conn:
        findings = procedures.check(conn)
    click.echo(table([(f.name, f.status, f.detail) for f in findings], ["object", "status", "detail"]))
    bad = [f for f in findings if f.status != "ok"]
    if bad:
        click.echo(f"{len(bad)} object(s) not as the sql/ files describe; run `engine db upgrade` to repair", err=True)
        sys.exit(1)
