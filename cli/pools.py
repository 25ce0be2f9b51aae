"""`engine pools ...`: named slot budgets shared by tasks."""
from __future__ import annotations

import click

from cli.common import Context, checked, handle_errors, pass_ctx, show
from engine import db
from engine.pools import delete_pool, set_pool


@click.group()
def pools():
    """Pools: named slot budgets shared by tasks."""


@pools.command("set", context_settings={"ignore_unknown_options": True})  # so `SLOTS` may be -1
@click.argument("name", callback=checked("pool name"))
@click.argument("slots", type=int)
@click.option("--include-deferred", is_flag=True, help="deferred TIs keep holding their slots")
@click.option("--description")
@click.option("--preempt-margin", type=int, default=None, metavar="M",
              help="preemptible pool: a waiting TI may stop running preemptible TIs of priority lower by at least M "
                   "(docs/priority.md); left out: never")
@pass_ctx
@handle_errors
def pools_set(c: Context, name, slots, include_deferred, description, preempt_margin):
    """Create or resize pool NAME to SLOTS (-1: unlimited; 0: closed, its TIs wait)."""
    db.in_transaction(c.engine(), lambda conn: set_pool(conn, name, slots, include_deferred, description,
                                                         preempt_margin))
    click.echo(f"pool {name}: {'unlimited' if slots == -1 else 'closed (0' if slots == 0 else slots} slots"
               + (": its TIs wait until it is opened)" if slots == 0 else "")
               + (", deferred TIs hold slots" if include_deferred else "")
               + (f", preemptible (margin {preempt_margin})" if preempt_margin is not None else ""))


@pools.command("list")
@pass_ctx
@handle_errors
def pools_list(c: Context):
    """Pools with their usage."""
    with db.connect(c.engine()) as conn:
        show(db.run(conn, "pools_list"))


@pools.command("delete")
@click.argument("name", callback=checked("pool name"))
@pass_ctx
@handle_errors
def pools_delete(c: Context, name):
    """Delete pool NAME (refused while a task uses it)."""
    db.in_transaction(c.engine(), lambda conn: delete_pool(conn, name))
    click.echo(f"pool {name} deleted")
