"""`engine`: the command line. Every command is a thin wrapper: decisions live in the database.
This module only assembles the command groups; each lives in its own module of `cli/`."""
from __future__ import annotations

import click

from cli.common import Context, OneLineGroup
from cli.config import config
from cli.dags import dags
from cli.db import db_group
from cli.demo import demo
from cli.drain import drain, undrain
from cli.events import events
from cli.logs import logs
from cli.metrics import metrics_cmd
from cli.pools import pools
from cli.runs import runs
from cli.services import scheduler, tick, triggerer, worker
from cli.sql import sql_group
from cli.status import status
from cli.tasks import tasks
from engine import logs as log_setup


@click.group(cls=OneLineGroup)
@click.option("--database-url", envvar=None, help="SQLAlchemy URL (default: ENGINE_DATABASE_URL, engine.toml, embedded)")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="engine.toml to read")
@click.option("-v", "--verbose", is_flag=True, help="log what the services do")
@click.option("--log-format", type=click.Choice(["text", "json"]), help="log lines as text or JSON (default: log_format)")
@click.pass_context
def main(ctx, database_url, config_path, verbose, log_format):
    """A workflow scheduler whose decisions are made by the database."""
    log_setup.setup(verbose, log_format)
    ctx.obj = Context(database_url, config_path)
    ctx.call_on_close(ctx.obj.close)


for command in (config, db_group, dags, runs, tasks, logs, pools, tick, scheduler, worker, triggerer, events, drain, undrain,
                status, demo, sql_group, metrics_cmd):
    main.add_command(command)


if __name__ == "__main__":
    main()
