"""Locust load test of a deployment's database: scheduler, worker and triggerer users calling the
engine's named statements the way `engine tick`, `engine worker` and `engine triggerer` do,
timed per statement, on a backlog that is kept topped up for the whole run.

    pip install '.[load]'          # the engine as an installed package, and Locust
    ENGINE_DATABASE_URL=postgresql+psycopg://user@host/db \\
    locust -f loadtests/locustfile.py --headless -u 8 -r 4 -t 60s --only-summary

What it does to that database (docs/operations.md, "Load test with Locust"):
  * at start: `engine db upgrade`, then syncs one DAG of its own, `locust_load` (ENGINE_LOAD_TASKS
    independent tasks, 20 by default, no retries), and keeps ENGINE_LOAD_BACKLOG (default
    1,000) of its TIs waiting (not yet claimed): a feeder triggers new runs whenever the backlog
    falls below that, so the claims never run dry;
  * users: SchedulerUser (create_dag_runs, schedule_tis, queue_tis: one request line each;
    `queue_tis (busy)`, another scheduler holding the lock, is its own line and not a failure),
    WorkerUser (a registered worker job: claim_tis, then finish_ti for each TI, or defer_ti for
    ENGINE_LOAD_DEFER_SHARE of them, 0.1 by default: the TI waits on a trigger), TriggererUser
    (a registered triggerer job: claim_triggers, fire_trigger for each, so a deferred TI resumes
    and a worker finishes it);
  * at the end (-t): every user finishes the request it is in (stop timeout 15 s unless
    --stop-timeout says otherwise), the jobs are marked finished, and unless
    ENGINE_LOAD_KEEP=1 every row of `locust_load` (runs, TIs, history, triggers, the DAG) and of
    its jobs is deleted: nothing is left running, queued or waiting for a worker.

Failures are real failures: a statement the database refused. No import from tests/: it needs
only the installed `engine` package.
"""
from __future__ import annotations

import json
import logging
import os
import random
import socket
import tempfile
import textwrap
import time
from pathlib import Path

import gevent
import sqlalchemy as sa
from locust import User, between, events, task

from engine import db, migrate
from engine.scheduler import queue_knobs

URL = os.environ.get("ENGINE_DATABASE_URL", "")
DAG_ID = "locust_load"
TASKS = int(os.environ.get("ENGINE_LOAD_TASKS", "20"))
BACKLOG = int(os.environ.get("ENGINE_LOAD_BACKLOG", "1000"))
DEFER_SHARE = float(os.environ.get("ENGINE_LOAD_DEFER_SHARE", "0.1"))
KEEP = os.environ.get("ENGINE_LOAD_KEEP", "") not in ("", "0", "false")
STOP_TIMEOUT = 15.0
TRIGGER = "engine.triggers:TimeDeltaTrigger"
HOST = socket.gethostname()

_engine = None
_feeder = None
_stopping = False
_runs = 0


def engine():
    global _engine
    if _engine is None:
        if not URL:
            raise SystemExit("set ENGINE_DATABASE_URL to the database to load")
        url = db.resolve_url(type("Cfg", (), {"database_url": URL})())
        kwargs = ({"connect_args": db.mysql_connect_args(), "isolation_level": "READ COMMITTED"}
                  if db.is_mysql_url(url) else {})
        _engine = sa.create_engine(url, poolclass=sa.pool.NullPool, **kwargs)
    return _engine


def record(name: str, start: float, exc: BaseException | None = None, length: int = 0) -> None:
    events.request.fire(request_type="sql", name=name, response_time=(time.perf_counter() - start) * 1000,
                        response_length=length, exception=exc, context={})


_connections: set = set()      # every connection a user or the feeder holds


def connection():
    """A connection of its own for one user (no pool shared between greenlets: a user that is
    stopped mid-statement tears only its own connection, which _stop invalidates)."""
    conn = engine().connect()
    _connections.add(conn)
    return conn


def close(conn) -> None:
    _connections.discard(conn)
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - a torn connection: the server rolls it back
        conn.invalidate()


def call(conn, name: str, fn):
    """fn(conn) in its own transaction, timed as request `name`. A held scheduler lock (or a
    deadlock, which the next call resolves) is `name (busy)`, a success of its own; anything
    else the database raises is a failure of `name`. Returns fn's result, or None."""
    start = time.perf_counter()
    try:
        with conn.begin():
            result = fn(conn)
    except sa.exc.DBAPIError as exc:
        if db.is_lock_busy(exc) or db.is_transient(exc):
            record(f"{name} (busy)", start)
        else:
            record(name, start, exc)
        return None
    record(name, start, length=len(result) if isinstance(result, list) else 0)
    return result


# ---- set-up, feeding, clean-up ----------------------------------------------------------------------

def sync_dag() -> None:
    from engine.dagsync import sync

    source = f'''
        from engine import DAG, BashTask
        with DAG({DAG_ID!r}, schedule=None, max_active_runs=100000, max_active_tasks=100000):
            for i in range({TASKS}):
                BashTask(f"t{{i:03d}}", bash_command="true", retries=0)
        '''
    with tempfile.TemporaryDirectory(prefix="locust-dags-") as folder:
        (Path(folder) / "locust_load.py").write_text(textwrap.dedent(source))
        sync(engine(), Path(folder), force=True)  # the DAG is the load test's own, whatever file defined it last


def waiting(conn) -> int:
    return conn.execute(sa.text("SELECT count(*) FROM task_instance WHERE dag_id = :d AND state IN "
                                "('none', 'scheduled', 'queued')"), {"d": DAG_ID}).scalar_one()


def feed() -> None:
    """Keep BACKLOG TIs of locust_load waiting: trigger runs when it falls below."""
    global _runs
    stamp = int(time.time())
    conn = connection()
    try:
        while not _stopping:
            try:
                with conn.begin():
                    missing = BACKLOG - waiting(conn)
                for _ in range(max(0, -(-missing // TASKS))):
                    _runs += 1
                    run_id = f"locust_{stamp}_{_runs}"
                    call(conn, "trigger_dag (feeder)", lambda c: db.run(c, "trigger_dag", dag_id=DAG_ID, run_id=run_id,
                                                                       conf="{}", now=None).all())
            except sa.exc.DBAPIError:
                pass  # the users report the database's trouble; the feeder tries again
            gevent.sleep(0.5)
    finally:
        close(conn)


def clean_up() -> None:
    """Delete every row of locust_load and of the jobs the users registered."""
    with engine().begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SET LOCAL lock_timeout = '30s'"))
        p = {"d": DAG_ID}
        trigger = conn.dialect.identifier_preparer.quote("trigger")  # a reserved word in MySQL
        conn.execute(sa.text(f"DELETE FROM {trigger} WHERE ti_id IN (SELECT id FROM task_instance WHERE dag_id = :d)"), p)
        for table in ("task_instance_history", "task_instance", "dag_run", "task_dependency", "task", "dag"):
            conn.execute(sa.text(f"DELETE FROM {table} WHERE dag_id = :d"), p)
        conn.execute(sa.text("DELETE FROM job WHERE hostname = :h AND kind IN ('worker', 'triggerer') "
                             "AND pid = :p"), {"h": HOST, "p": os.getpid()})


@events.init.add_listener
def _init(environment, **kwargs):
    if not environment.stop_timeout:
        environment.stop_timeout = STOP_TIMEOUT  # users finish the statement they are in: no torn transactions


@events.test_start.add_listener
def _start(environment, **kwargs):
    global _feeder, _stopping
    _stopping = False
    try:
        db.ensure_database(engine())  # MySQL/MariaDB: created when missing, as `engine db upgrade` does
        migrate.upgrade(engine())
        sync_dag()
    except Exception as exc:  # noqa: BLE001 - no load test on a database that is not set up
        logging.getLogger("locustfile").error("set-up failed: %s", exc)
        environment.process_exit_code = 1
        environment.runner.quit()
        return
    _feeder = gevent.spawn(feed)


@events.test_stop.add_listener
def _stop(environment, **kwargs):
    global _stopping
    _stopping = True
    if _feeder is not None:
        _feeder.join(timeout=10)
    for conn in list(_connections):  # a user stopped mid-statement: its transaction is rolled back
        _connections.discard(conn)
        conn.invalidate()
    if not KEEP:
        clean_up()


@events.quitting.add_listener
def _quit(environment, **kwargs):
    if _engine is not None:
        _engine.dispose()


# ---- users ------------------------------------------------------------------------------------------

class EngineUser(User):
    """A user with a connection of its own and, for `kind`, a registered job of the engine,
    finished when the user stops."""
    abstract = True
    kind: str | None = None

    def on_start(self):
        self.conn = connection()
        self.job_id = None
        if self.kind:
            with self.conn.begin():
                self.job_id = db.run(self.conn, "register_job", kind=self.kind, hostname=HOST,
                                     pid=os.getpid()).scalar_one()

    def on_stop(self):
        if self.job_id is not None:
            if self.kind == "triggerer":
                call(self.conn, "release_triggers", lambda c: db.run(c, "release_triggers", job_id=self.job_id))
            with self.conn.begin():
                db.run(self.conn, "finish_job", job_id=self.job_id)
        close(self.conn)


class SchedulerUser(EngineUser):
    wait_time = between(0.05, 0.2)
    weight = 1

    @task
    def tick(self):
        call(self.conn, "create_dag_runs", lambda c: db.run(c, "create_dag_runs", now=None).all())
        call(self.conn, "schedule_tis", lambda c: db.run(c, "schedule_tis", now=None, batch=100).all())
        call(self.conn, "queue_tis", lambda c: db.run(c, "queue_tis", max_tis=512, job_id=None, now=None,
                                                                 **queue_knobs()).all())


class WorkerUser(EngineUser):
    wait_time = between(0.01, 0.05)
    weight = 3
    kind = "worker"

    @task
    def claim_and_finish(self):
        rows = call(self.conn, "claim_tis", lambda c: db.run(c, "claim_tis", job_id=self.job_id, hostname=HOST,
                                                  queues=["default"], limit=4, log_dir=tempfile.gettempdir(),
                                                  now=None).all())
        for ti in rows or []:
            if ti.next_method is None and random.random() < DEFER_SHARE:
                call(self.conn, "defer_ti", lambda c: db.run(
                    c, "defer_ti", ti_id=ti.ti_id, try_number=ti.try_number, classpath=TRIGGER,
                    trigger_kwargs=json.dumps({"seconds": 0}), method="resume", next_kwargs="{}", timeout=600,
                    now=None).all())
            else:
                call(self.conn, "finish_ti", lambda c: db.run(c, "finish_ti", ti_id=ti.ti_id, try_number=ti.try_number,
                                                   exit_code=random.choice([0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
                                                   timed_out=False, reason=None, now=None).all())


class TriggererUser(EngineUser):
    wait_time = between(0.05, 0.2)
    weight = 1
    kind = "triggerer"

    @task
    def claim_and_fire(self):
        rows = call(self.conn, "claim_triggers", lambda c: db.run(c, "claim_triggers", job_id=self.job_id, limit=50,
                                                       threshold=60.0, now=None).all())
        for trig in rows or []:
            call(self.conn, "fire_trigger", lambda c: db.run(c, "fire_trigger", trigger_id=trig.trigger_id,
                                                  event=json.dumps({"fired": True}), error=None, now=None,
                                                  boost=1000).all())
