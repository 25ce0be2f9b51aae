"""`engine sql ...`: the SQL files."""
from __future__ import annotations

from pathlib import Path

import click

from cli.common import Context, handle_errors, pass_ctx
from engine import db
from engine.errors import EngineError


@click.group("sql")
def sql_group():
    """The SQL files."""


@sql_group.command("lint")
@click.argument("path", required=False, type=click.Path(exists=True, file_okay=True, dir_okay=True))
@click.option("--server", "server", default=None, metavar="URL",
              help="a MySQL/MariaDB server that parses the MySQL files in a scratch database (default: the "
                   "configured database URL when it is MySQL/MariaDB)")
@pass_ctx
@handle_errors
def sql_lint(c: Context, path, server):
    """Check the SQL files under PATH (default: the engine's sql/ folder): PostgreSQL files and
    PL/pgSQL bodies parse (pglast); MySQL files define their objects, and a MySQL/MariaDB server,
    when one is given or configured, parses them; exit 1 with one `file:line: message` line per
    problem."""
    from engine.lint import lint
    from engine.paths import SQL_DIR

    if server is None and db.is_mysql_url(c.cfg().database_url or "postgresql://"):
        server = db.resolve_url(c.cfg())
    if server is not None and not db.is_mysql_url(server):
        raise EngineError(f"--server {server!r} is not a MySQL/MariaDB URL; use e.g. mysql+pymysql://root@host:3306")
    files, problems = lint(Path(path).resolve() if path else SQL_DIR, server)
    for p in problems:
        click.echo(str(p))
    if problems:
        raise EngineError(f"{len(problems)} problem(s) in {len({p.path for p in problems})} of {len(files)} SQL file(s)")
    pg = sum(1 for f in files if "mysql" not in f.parts)
    click.echo(f"{len(files)} SQL file(s) checked: {pg} PostgreSQL (statements and PL/pgSQL bodies parse), "
               f"{len(files) - pg} MySQL (each defines its object; blocks balance"
               + ("; the server parsed them)" if server else "; no server parsed them: --server URL)"))
