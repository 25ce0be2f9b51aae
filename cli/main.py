"""`engine`: the command line. Every command is a thin wrapper: decisions live in the database.
This module only assembles the command groups; each lives in its own module of `cli/`, imported
when it runs (or when `--help` lists it), so `engine tick` does not load what `engine db` needs."""
from __future__ import annotations

import importlib

import click

from cli.common import Context, OneLineGroup
from engine import logs as log_setup

# command name -> "module:attribute"
COMMANDS = {"config": "cli.config:config", "db": "cli.db:db_group", "dags": "cli.dags:dags", "runs": "cli.runs:runs",
            "tasks": "cli.tasks:tasks", "logs": "cli.logs:logs", "pools": "cli.pools:pools",
            "tick": "cli.services:tick", "scheduler": "cli.services:scheduler", "worker": "cli.services:worker",
            "triggerer": "cli.services:triggerer", "events": "cli.events:events", "drain": "cli.drain:drain",
            "undrain": "cli.drain:undrain", "status": "cli.status:status", "demo": "cli.demo:demo",
            "sql": "cli.sql:sql_group", "metrics": "cli.metrics:metrics_cmd",
            "dispatcher": "cli.executors:dispatcher", "celery-worker": "cli.executors:celery_worker",
            "standalone": "cli.executors:standalone"}


class LazyGroup(OneLineGroup):
    """The command groups of COMMANDS, each imported on first use."""

    def list_commands(self, ctx):
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx, name):
        if name not in self.commands and name in COMMANDS:
            module, attr = COMMANDS[name].split(":")
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return self.commands.get(name)


@click.group(cls=LazyGroup)
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


if __name__ == "__main__":
    main()
