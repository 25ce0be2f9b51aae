"""Retention: delete old rows in bounded batches through the stored procedure clean_v1.

Each call of clean_v1 is one short transaction deleting at most `batch` rows per table; this
module only repeats the call while a table reports more, and adds the counts up. What may be
deleted (never anything a live run or a live job still needs) is decided in the procedure:
see sql/postgresql/clean_v1.sql and docs/operations.md, "Retention".
"""
from __future__ import annotations

import time

import sqlalchemy as sa

from engine import db
from engine.errors import EngineError

TABLES = ("dag_run", "task_instance_history", "trigger", "job", "tick_log")


def clean(eng, older_than_s: float, *, table: str | None = None, batch: int = 1000, dry_run: bool = False,
          now=None, busy_timeout: float = 60.0, max_calls: int | None = None) -> dict:
    """Run clean_v1 until no table has more to delete (dry_run: once). Returns
    {"tables": {name: rows}, "calls": n, "done": bool}. Another cleaner holding the lock
    (the scheduler's periodic cleanup, another `engine db clean`) is waited for up to
    busy_timeout seconds, then this stops with an EngineError."""
    if table is not None and table not in TABLES:
        raise EngineError(f"unknown table {table!r} for db clean; use one of {', '.join(TABLES)}")
    totals = {t: 0 for t in (TABLES if table is None else (table,))}
    calls = 0
    waited_since = None
    while max_calls is None or calls < max_calls:
        try:
            with db.connect(eng) as conn:
                rows = db.run(conn, "clean", table_name=table, older_than=older_than_s, batch=batch,
                              dry_run=dry_run, interval=None, now=now).all()
        except sa.exc.DBAPIError as exc:
            if not (db.is_lock_busy(exc) or db.is_transient(exc)):
                raise
            waited_since = waited_since or time.monotonic()
            if time.monotonic() - waited_since > busy_timeout:
                raise EngineError(f"another cleaner (a scheduler's periodic cleanup or another `engine db clean`) "
                                  f"held scheduler_lock db_clean for {busy_timeout:g} s; try again later") from None
            time.sleep(0.2)
            continue
        waited_since = None
        calls += 1
        for r in rows:
            if r.table_name is not None:
                totals[r.table_name] += int(r.deleted)
        if dry_run or not any(r.more for r in rows):
            return {"tables": totals, "calls": calls, "done": True}
    return {"tables": totals, "calls": calls, "done": False}
