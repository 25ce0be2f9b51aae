"""`engine pools ...`: named slot budgets shared by tasks."""
from __future__ import annotations

import click

from cli.common import Context, checked, handle_errors, pass_ctx, show
from engine import db, validate
from engine.errors import EngineError


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
    if preempt_margin is not None and not 0 <= preempt_margin <= validate.INT32_MAX:
        raise EngineError(f"pool {name!r}: --preempt-margin must be from 0 to {validate.INT32_MAX} (got {preempt_margin}); "
                          "leave it out for a pool whose TIs are never preempted")
    if slots != -1 and not 0 <= slots <= validate.MAX_SLOTS:
        raise EngineError(f"pool {name!r}: slots must be from 1 to {validate.MAX_SLOTS}, or -1 for unlimited, "
                          f"or 0 to close the pool (its TIs wait) (got {slots})")
    if description is not None:
        validate.check_text(description, "--description", f"pool {name!r}")
    with db.connect(c.engine()) as conn:
        if slots > 0:
            wide = db.run(conn, "pool_widest_task", name=name, slots=slots).first()
            if wide:
                raise EngineError(f"pool {name!r}: {slots} slot(s) is fewer than task {wide.dag_id}.{wide.task_id} "
                                  f"needs (pool_slots={wide.pool_slots}); its TIs could never run: give the pool "
                                  f"at least {wide.pool_slots} slots or lower the task's pool_slots and sync first")
        db.run(conn, "pools_set", name=name, slots=slots, include_deferred=include_deferred, description=description,
               preempt_margin=preempt_margin)
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
    if name == "default_pool":
        raise EngineError("default_pool cannot be deleted; resize it with `engine pools set default_pool SLOTS`")
    with db.connect(c.engine()) as conn:
        user = db.run(conn, "pool_users", name=name).first()
        if user:
            raise EngineError(f"pool {name!r} is used by task {user.dag_id}.{user.task_id}; move its tasks to another pool first")
        if db.run(conn, "pools_delete", name=name).rowcount == 0:
            raise EngineError(f"unknown pool {name!r}; see `engine pools list`")
    click.echo(f"pool {name} deleted")
