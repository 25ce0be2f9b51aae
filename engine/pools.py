"""Pools as operators change them (`engine pools set|delete`), and the lock of definitions.

A pool's checks read tasks, and a sync's checks read pools: each takes the lock of definitions
first (lock_definitions), so a check and the write it allows are one step against the other
(a task is never stored wider than its pool, nor a pool deleted under a task being added)."""
from __future__ import annotations

from engine import db, validate
from engine.errors import EngineError


def lock_definitions(conn) -> None:
    """scheduler_lock('definitions') FOR UPDATE until `conn`'s transaction ends (waits)."""
    if db.run(conn, "lock_definitions").first() is None:
        raise EngineError("the lock row scheduler_lock 'definitions' is missing (deleted by hand?); put it back "
                          "with INSERT INTO scheduler_lock (name) VALUES ('definitions')")


def set_pool(conn, name: str, slots: int, include_deferred: bool = False, description: str | None = None,
             preempt_margin: int | None = None) -> None:
    """Create or resize pool `name` in `conn`'s transaction; EngineError (one line) for values out
    of range or a pool smaller than an active task of it needs."""
    if preempt_margin is not None and not 0 <= preempt_margin <= validate.INT32_MAX:
        raise EngineError(f"pool {name!r}: --preempt-margin must be from 0 to {validate.INT32_MAX} (got {preempt_margin}); "
                          "leave it out for a pool whose TIs are never preempted")
    if slots != -1 and not 0 <= slots <= validate.MAX_SLOTS:
        raise EngineError(f"pool {name!r}: slots must be from 1 to {validate.MAX_SLOTS}, or -1 for unlimited, "
                          f"or 0 to close the pool (its TIs wait) (got {slots})")
    if description is not None:
        validate.check_text(description, "--description", f"pool {name!r}")
    lock_definitions(conn)
    if slots > 0:
        wide = db.run(conn, "pool_widest_task", name=name, slots=slots).first()
        if wide:
            raise EngineError(f"pool {name!r}: {slots} slot(s) is fewer than task {wide.dag_id}.{wide.task_id} "
                              f"needs (pool_slots={wide.pool_slots}); its TIs could never run: give the pool "
                              f"at least {wide.pool_slots} slots or lower the task's pool_slots and sync first")
    db.run(conn, "pools_set", name=name, slots=slots, include_deferred=include_deferred, description=description,
           preempt_margin=preempt_margin)


def delete_pool(conn, name: str) -> None:
    """Delete pool `name` in `conn`'s transaction; EngineError (one line) for default_pool, an
    unknown pool, or one a task uses."""
    if name == "default_pool":
        raise EngineError("default_pool cannot be deleted; resize it with `engine pools set default_pool SLOTS`")
    lock_definitions(conn)
    user = db.run(conn, "pool_users", name=name).first()
    if user:
        raise EngineError(f"pool {name!r} is used by task {user.dag_id}.{user.task_id}; move its tasks to another pool first")
    if db.run(conn, "pools_delete", name=name).rowcount == 0:
        raise EngineError(f"unknown pool {name!r}; see `engine pools list`")
