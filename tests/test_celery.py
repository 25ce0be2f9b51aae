"""The celery executor for real: `engine dispatcher` and `engine celery-worker` processes on a
real broker (RabbitMQ and Redis) and both databases. A DAG mixes executors (with a deferral on Celery); cancel reaches a
try running on Celery. RabbitMQ runs with PostgreSQL, Redis with MariaDB. Kill -9 of Celery
workers and the dispatcher, redelivery and broker restarts: tests/test_chaos.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.dagsync import sync
from tests.brokers import broker_or_skip, celery_env, delete_queues
from tests.cluster import CALM, REPO, Cluster, check_invariants, violations
from tests.helpers import sql, trigger
from tests.test_chaos import wait_for

# With pytest-xdist, every test that uses the shared brokers runs on one worker (--dist
# loadgroup): the chaos test restarts RabbitMQ, which would cut the others' connections.
pytestmark = pytest.mark.xdist_group("brokers")

# Each broker on one dialect (the suite's time): RabbitMQ with PostgreSQL, Redis with MariaDB.
BROKER_OF = {"postgresql": "rabbitmq", "mysql": "redis"}

MIXED = """
from engine import DAG, BashTask, PythonTask
CMD = 'echo "$ENGINE_RUN_ID $ENGINE_TASK_ID $ENGINE_TRY_NUMBER" >> {out}; '
with DAG("mixed", max_active_tasks=8):
    a = BashTask("a", bash_command=CMD + "true")
    c = [BashTask(f"c{{i}}", bash_command=CMD + "sleep 0.2", executor="celery", retries=1, retry_delay=0)
         for i in range(3)]
    p = PythonTask("p", python_callable="helpers_mod:hello", op_kwargs={{"out": "{out}"}}, executor="celery",
                   queue="other")
    w = PythonTask("w", python_callable="helpers_mod:wait", op_kwargs={{"out": "{out}"}}, executor="celery")
    slow = BashTask("slow", bash_command=CMD + "sleep 120", executor="celery", retries=0)
    d = BashTask("d", bash_command=CMD + "true")
    a >> c >> d
    a >> p >> d
    a >> w >> d
"""
HELPERS = """
import os
from engine import Defer, TimeDeltaTrigger

def note(out):
    with open(out, "a") as f:
        f.write(f"{os.environ['ENGINE_RUN_ID']} {os.environ['ENGINE_TASK_ID']} {os.environ['ENGINE_TRY_NUMBER']}\\n")

def wait(out):
    note(out)
    raise Defer(trigger=TimeDeltaTrigger(seconds=0.2), method="resume", kwargs={"out": out})

def resume(event, out):
    print("resumed on celery")

def hello(out):
    print("hello from celery")
    with open(out, "a") as f:
        f.write(f"{os.environ['ENGINE_RUN_ID']} {os.environ['ENGINE_TASK_ID']} {os.environ['ENGINE_TRY_NUMBER']}\\n")
"""


def _state(eng, task_id):
    rows = sql(eng, "SELECT state FROM task_instance WHERE task_id = :t", t=task_id)
    return rows[0][0] if rows else None


def test_mixed_executors_and_cancel_on_celery(eng, db_url, dialect, tmp_path):
    broker = BROKER_OF[dialect]
    url = broker_or_skip(broker)
    out = tmp_path / "executions.txt"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "mixed.py").write_text(MIXED.format(out=out))
    (dags / "helpers_mod.py").write_text(HELPERS)
    sync(eng, dags)
    trigger(eng, "mixed", "r1")
    cluster = Cluster(db_url, tmp_path, env={**celery_env(broker, url), **CALM})
    try:
        cluster.start("scheduler")
        cluster.start("worker")
        cluster.start("triggerer")
        cluster.start("dispatcher")
        cluster.start("celery-worker", args=("--queues", "default,other", "--concurrency", "3"))
        wait_for("the slow celery try to run", lambda: _state(eng, "slow") == "running", 90, cluster)
        kill = subprocess.run([sys.executable, "-m", "cli.main", "tasks", "kill", "mixed", "r1", "slow"],
                              env={**os.environ, "ENGINE_DATABASE_URL": db_url, "PYTHONPATH": str(REPO)},
                              capture_output=True, text=True, timeout=60)
        assert kill.returncode == 0, kill.stderr
        wait_for("the run to end", lambda: sql(eng, "SELECT state FROM dag_run")[0][0] != "running", 90, cluster)
        tries = {r.task_id: r for r in sql(eng, "SELECT task_id, state, try_number, hostname, worker_job_id "
                                                "FROM task_instance")}
        assert {t: r.state for t, r in tries.items()} == {
            "a": "success", "c0": "success", "c1": "success", "c2": "success", "p": "success",
            "d": "success", "slow": "failed", "w": "success"}
        # celery tries were started by start_ti_v1 (their dispatch rows are gone), by jobs that
        # claim from no queue of the database queue (job.queues empty: status --check knows)
        assert sql(eng, "SELECT count(*) FROM ti_dispatch")[0][0] == 0
        kinds = dict(sql(eng, "SELECT j.id, j.queues FROM job j WHERE j.kind = 'worker'"))
        assert all(kinds[tries[t].worker_job_id] == "" for t in ("c0", "c1", "c2", "p", "slow", "w"))
        assert kinds[tries["a"].worker_job_id] == "default"
        log = sql(eng, "SELECT log_path FROM task_instance WHERE task_id = 'p'")[0][0]
        assert "hello from celery" in Path(log).read_text()
        log = sql(eng, "SELECT log_path FROM task_instance WHERE task_id = 'w'")[0][0]
        assert "resumed on celery" in Path(log).read_text()  # the resume was dispatched and started too
        with eng.connect() as conn:
            report = check_invariants(conn, "mixed", executions=out)
        assert violations(report) == {"every run succeeded": ["r1: failed"]}, json.dumps(report, default=str)
    finally:
        codes = cluster.stop()
        delete_queues(url, [cluster.env["ENGINE_CELERY_QUEUE_PREFIX"] + q for q in ("default", "other")])
    assert all(code == 0 for code in codes.values()), codes


class _FakeWorkerApp:
    """app.start() of a Celery worker, scripted: each run becomes ready (or not) and then ends on
    its own, or because a signal handler set Celery's shutdown flag (here, or during the pause)."""

    def __init__(self, runs, monkeypatch):
        from celery.worker import state

        self.runs, self.state, self.calls = list(runs), state, 0
        monkeypatch.setattr(state, "should_stop", None)
        monkeypatch.setattr(state, "should_terminate", None)

    def start(self, argv):
        from celery.signals import worker_ready

        assert argv[0] == "worker"
        self.calls += 1
        ready, ends = self.runs.pop(0)
        if ready:
            worker_ready.send(sender=None)
        if ends == "asked":
            self.state.should_stop = 0
        return 0 if ready else 1


@pytest.mark.parametrize("runs, calls, code", [
    ([(True, "asked")], 1, 0),                           # SIGTERM: stop
    ([(False, "own")], 1, 1),                            # never ready (a bad setting): not retried
    ([(True, "own"), (True, "own"), (True, "asked")], 3, 0),  # stopped on its own: started again
    ([(True, "own"), (False, "own")], 2, 1),             # ... unless the new one cannot start
])
def test_celery_worker_is_started_again_when_it_stops_on_its_own(monkeypatch, runs, calls, code):
    from engine.celery import run_worker

    app, pauses = _FakeWorkerApp(runs, monkeypatch), []
    assert run_worker(app, ["worker"], sleep=pauses.append) == code
    assert app.calls == calls
    assert pauses == [0.1] * sum(10 * 2 ** i for i in range(calls - 1))  # 1 s, 2 s, ... before each new start


def test_celery_worker_asked_to_stop_while_it_waits_to_start_again(monkeypatch):
    from engine.celery import run_worker

    app = _FakeWorkerApp([(True, "own")], monkeypatch)
    assert run_worker(app, ["worker"], sleep=lambda _: setattr(app.state, "should_terminate", True)) == 0
    assert app.calls == 1
