"""`engine config ...`: settings."""
from __future__ import annotations

import click
import sqlalchemy as sa

from cli.common import Context, handle_errors, pass_ctx
from engine.table import table


@click.group()
def config():
    """Settings."""


@config.command("show")
@pass_ctx
@handle_errors
def config_show(c: Context):
    """Print every setting, its effective value and where it came from."""
    cfg = c.cfg()
    rows = [(name, v.value if name != "database_url" or not v.value else
             sa.engine.make_url(str(v.value)).render_as_string(hide_password=True), v.source) for name, v in cfg.items()]
    click.echo(table(rows, ["setting", "value", "source"]))
