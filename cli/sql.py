"""`engine sql ...`: the SQL files."""
from __future__ import annotations

from pathlib import Path

import click

from cli.common import handle_errors
from engine.errors import EngineError


@click.group("sql")
def sql_group():
    """The SQL files."""


@sql_group.command("lint")
@click.argument("path", required=False, type=click.Path(exists=True, file_okay=True, dir_okay=True))
@handle_errors
def sql_lint(path):
    """Check the SQL files under PATH (default: the engine's sql/ folder) without a database:
    PostgreSQL files and PL/pgSQL bodies parse; MySQL files define their objects; exit 1 with
    one `file:line: message` line per problem."""
    from engine.lint import lint
    from engine.paths import SQL_DIR

    files, problems = lint(Path(path).resolve() if path else SQL_DIR)
    for p in problems:
        click.echo(str(p))
    if problems:
        raise EngineError(f"{len(problems)} problem(s) in {len({p.path for p in problems})} of {len(files)} SQL file(s)")
    pg = sum(1 for f in files if "mysql" not in f.parts)
    click.echo(f"{len(files)} SQL file(s) checked: {pg} PostgreSQL (statements and PL/pgSQL bodies parse), "
               f"{len(files) - pg} MySQL (each defines its object; blocks balance)")
