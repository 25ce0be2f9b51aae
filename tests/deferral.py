"""Drivers for the deferral tests: defer a claimed TI, fire its trigger, read what the limits say."""
from __future__ import annotations

import json

from click.testing import CliRunner

from engine import db
from tests.helpers import sql

FAR = "2999-01-01T00:00:00+00:00"  # a DateTimeTrigger moment that never comes in a test
DATETIME = "engine.triggers:DateTimeTrigger"


def defer(eng, ti, classpath: str = DATETIME, kwargs: dict | None = None, method: str = "resume",
          next_kwargs: dict | None = None, timeout: float | None = None, now=None):
    with db.connect(eng) as conn:
        return db.run(conn, "defer_ti", ti_id=ti.ti_id, try_number=ti.try_number, classpath=classpath,
                      trigger_kwargs=json.dumps(kwargs if kwargs is not None else {"moment": FAR}), method=method,
                      next_kwargs=json.dumps(next_kwargs or {}), timeout=timeout, now=now).scalar()


def fire(eng, trigger_id: int, event=None, error: str | None = None, boost: int = 1000, now=None):
    with db.connect(eng) as conn:
        return db.run(conn, "fire_trigger", trigger_id=trigger_id, event=None if error else json.dumps(event),
                      error=error, now=now, boost=boost).scalar()


def trigger_ids(eng, dag_id: str | None = None, state: str = "deferred") -> list[int]:
    where = " AND dag_id = :d" if dag_id else ""
    return [r.trigger_id for r in sql(eng, f"SELECT trigger_id FROM task_instance WHERE state = :s{where} ORDER BY id",
                                      s=state, d=dag_id)]


def quoted(eng, name: str) -> str:
    """An identifier that is a reserved word in MySQL (`trigger`, `key`), quoted for the dialect."""
    return f"`{name}`" if eng.dialect.name != "postgresql" else f'"{name}"'


def over_cap(eng) -> list:
    """Rows of limit_usage whose usage exceeds the cap (must always be empty)."""
    return sql(eng, "SELECT * FROM limit_usage WHERE used > cap")


def states(eng, dag_id: str) -> dict:
    rows = sql(eng, "SELECT state, count(*) AS n FROM task_instance WHERE dag_id = :d GROUP BY state", d=dag_id)
    return {r.state: r.n for r in rows}


def cli(db_url: str, *args: str):
    """`engine ARGS` in-process (click's runner): exit code and output."""
    from cli.main import main

    made, make = [], db.make_engine
    db.make_engine = lambda url, **kw: made.append(make(url, **kw)) or made[-1]  # to dispose what the command opened
    try:
        result = CliRunner().invoke(main, ["--database-url", db_url, *args], catch_exceptions=False)
    finally:
        db.make_engine = make
        for e in made:
            e.dispose()
    return result.exit_code, result.output
