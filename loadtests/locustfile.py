"""Locust load test of a deployment's database: scheduler and worker users calling the stored
functions the way `engine tick` and `engine worker` do, timed per procedure.

    ENGINE_DATABASE_URL=postgresql+psycopg://user@host/db \\
    locust -f loadtests/locustfile.py --headless -u 8 -r 4 -t 60s --only-summary

Set ENGINE_LOAD_SETUP=1000 (TIs) to (re)create a synthetic backlog at start (this EMPTIES the
engine tables of that database). Each request line in Locust's table is one procedure:
create_dag_runs, schedule_tis, queue_tis (busy counts as a failure named "busy"),
claim_tis, finish_ti.
"""
from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import sqlalchemy as sa
from locust import User, between, events, task

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine import db, migrate  # noqa: E402

URL = os.environ.get("ENGINE_DATABASE_URL", "")
_engine = None


def engine():
    global _engine
    if _engine is None:
        if not URL:
            raise SystemExit("set ENGINE_DATABASE_URL to the database to load")
        _engine = db.make_engine(URL)
    return _engine


@events.test_start.add_listener
def _setup(environment, **kwargs):
    n = int(os.environ.get("ENGINE_LOAD_SETUP", "0") or 0)
    migrate.upgrade(engine())
    if n:
        from tests.race import setup_world  # the same synthetic world as the race test
        setup_world(engine(), n)


def timed(name: str, fn):
    start = time.perf_counter()
    exc = None
    result = None
    try:
        result = fn()
    except sa.exc.DBAPIError as e:
        exc = e if not db.is_lock_busy(e) else RuntimeError("busy")
        if db.is_lock_busy(e):
            name = f"{name} (busy)"
    events.request.fire(request_type="sql", name=name, response_time=(time.perf_counter() - start) * 1000,
                        response_length=len(result) if isinstance(result, list) else 0, exception=exc, context={})
    return result


class SchedulerUser(User):
    wait_time = between(0.05, 0.2)
    weight = 1

    @task
    def tick(self):
        with db.connect(engine()) as c:
            timed("create_dag_runs", lambda: db.run(c, "create_dag_runs", now=None).all())
        with db.connect(engine()) as c:
            timed("schedule_tis", lambda: db.run(c, "schedule_tis", now=None, batch=100).all())
        with db.connect(engine()) as c:
            timed("queue_tis", lambda: db.run(c, "queue_tis", max_tis=512, job_id=None, now=None).all())


class WorkerUser(User):
    wait_time = between(0.01, 0.05)
    weight = 3

    @task
    def claim_and_finish(self):
        with db.connect(engine()) as c:
            rows = timed("claim_tis", lambda: db.run(c, "claim_tis", job_id=None, hostname="locust",
                                                     queues=["default"], limit=4, log_dir="/tmp", now=None).all())
        for ti in rows or []:
            with db.connect(engine()) as c:
                timed("finish_ti", lambda: db.run(c, "finish_ti", ti_id=ti.ti_id, try_number=ti.try_number,
                                                  exit_code=random.choice([0, 0, 0, 1]), timed_out=False,
                                                  reason=None, now=None).all())
