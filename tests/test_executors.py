"""The executor contract at the procedure level (both dialects), with an injected clock:
dispatch_tis hands queued TIs of a dispatching executor over with one valid token each and
re-sends lost messages after the timeout; start_ti_v1 starts a try only for the current token,
so duplicate, late and redelivered messages start nothing; the database queue never claims
them; a DAG can mix executors."""
from __future__ import annotations

from datetime import timedelta

from engine import db
from tests.helpers import claim, finish, sql, sync_source, tick, trigger

MIXED = """
    with DAG("mixed", max_active_tasks=10):
        a = BashTask("a", bash_command="true", retries=1, retry_delay=0)
        b = [BashTask(f"c{i}", bash_command="true", executor="celery", queue="cq", retries=1, retry_delay=0)
             for i in range(3)]
        a >> b
"""


def dispatch(eng, now, limit=100, resend_after=20.0, executor="celery") -> list:
    with db.connect(eng) as conn:
        return db.run(conn, "dispatch_tis", executor=executor, limit=limit, resend_after=resend_after, now=now).all()


def start(eng, ti_id, token, job_id, now) -> list:
    with db.connect(eng) as conn:
        return db.run(conn, "start_ti", ti_id=ti_id, token=token, job_id=job_id, hostname="h",
                      log_dir="/tmp/engine-test-logs", now=now).all()


def register(eng) -> int:
    with db.connect(eng) as conn:
        return db.run(conn, "register_job", kind="worker", hostname="h", pid=1).scalar_one()


def test_dispatch_start_and_fences(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", MIXED)
    trigger(eng, "mixed")
    t0 = sql(eng, "SELECT now()")[0][0]
    tick(eng, cfg, now=t0)
    assert dispatch(eng, t0) == []                     # 'a' is the database queue's
    [a] = claim(eng, now=t0)
    assert a.task_id == "a"
    finish(eng, a, 0, now=t0)
    tick(eng, cfg, now=t0)
    assert claim(eng, queues=("default", "cq"), now=t0) == []   # never claimed by an engine worker
    sent = dispatch(eng, t0)
    assert sorted(r.task_id for r in sent) == ["c0", "c1", "c2"] and {r.queue for r in sent} == {"cq"}
    assert {r.attempt for r in sent} == {1} and len({r.token for r in sent}) == 3
    assert dispatch(eng, t0 + timedelta(seconds=19)) == []       # in flight: never sent twice
    job = register(eng)

    # c0: the message arrives, starts the try; its duplicate (redelivery) starts nothing.
    c0 = next(r for r in sent if r.task_id == "c0")
    [row] = start(eng, c0.ti_id, c0.token, job, t0)
    assert (row.try_number, row.kind, row.bash_command) == (1, "bash", "true")
    assert start(eng, c0.ti_id, c0.token, job, t0) == []
    assert sql(eng, "SELECT state, worker_job_id FROM task_instance WHERE id = :i", i=c0.ti_id)[0] == ("running", job)

    # c1: its message is lost; after the timeout it is re-sent with a new token: the late old
    # message starts nothing, the new one starts the try.
    c1 = next(r for r in sent if r.task_id == "c1")
    later = t0 + timedelta(seconds=21)  # job_heartbeat_threshold is 60 s
    resent = dispatch(eng, later)
    assert sorted(r.task_id for r in resent) == ["c1", "c2"] and {r.attempt for r in resent} == {2}
    new = next(r for r in resent if r.task_id == "c1")
    assert new.token != c1.token
    assert start(eng, c1.ti_id, c1.token, job, later) == []
    assert len(start(eng, c1.ti_id, new.token, job, later)) == 1
    assert start(eng, c1.ti_id, "not-a-token", job, later) == []

    # c2: requeued (a new queued period) while its message was in flight: that message is void
    # and the TI is dispatched again at once.
    c2 = next(r for r in resent if r.task_id == "c2")
    sql(eng, "UPDATE task_instance SET state = 'scheduled', queued_at = NULL WHERE id = :i", i=c2.ti_id)
    assert start(eng, c2.ti_id, c2.token, job, later) == []
    tick(eng, cfg, now=later)
    [again] = dispatch(eng, later)
    assert again.ti_id == c2.ti_id and again.token != c2.token
    assert len(start(eng, c2.ti_id, again.token, job, later)) == 1

    # Outcomes go through the fenced finish procedure: a late report of try 1 after try 2 of
    # c0 started changes nothing.
    assert finish(eng, row, 1, now=later) == "up_for_retry"
    assert sql(eng, "SELECT count(*) FROM ti_dispatch")[0][0] == 0
    tick(eng, cfg, now=later + timedelta(seconds=1))
    [retry] = dispatch(eng, later + timedelta(seconds=1))
    [row2] = start(eng, retry.ti_id, retry.token, job, later + timedelta(seconds=1))
    assert row2.try_number == 2
    assert finish(eng, row, 0, now=later) is None               # stale: try 1 is over
    assert sql(eng, "SELECT state FROM task_instance WHERE id = :i", i=c0.ti_id)[0][0] == "running"


def test_dispatch_respects_limit_and_unknown_executor(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", MIXED.replace('"a", bash_command="true"', '"a", bash_command="true", '
                                                                                     'executor="celery"'))
    trigger(eng, "mixed")
    tick(eng, cfg)
    assert dispatch(eng, None, executor="nope") == []
    assert dispatch(eng, None, limit=0) == []
    [a] = dispatch(eng, None, limit=5)
    assert a.task_id == "a"
    assert dispatch(eng, None, resend_after=1e9) == []


STANDALONE = """
from engine import DAG, BashTask, PythonTask
with DAG("local"):
    BashTask("a", bash_command="true") >> PythonTask("w", python_callable="local_mod:wait")
"""
LOCAL_MOD = """
from engine import Defer, TimeDeltaTrigger

def wait():
    raise Defer(trigger=TimeDeltaTrigger(seconds=0.2), method="resume")

def resume(event):
    print("resumed")
"""


def test_standalone_runs_scheduler_triggerer_and_tries(eng, db_url, tmp_path):
    """`engine standalone`: one command runs the scheduler, the triggerer (a deferring task
    resumes) and the tries; SIGTERM stops everything cleanly."""
    from engine.dagsync import sync
    from tests.cluster import CALM, Cluster
    from tests.test_chaos import wait_for

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "local.py").write_text(STANDALONE)
    (dags / "local_mod.py").write_text(LOCAL_MOD)
    sync(eng, dags)
    trigger(eng, "local", "r1")
    cluster = Cluster(db_url, tmp_path, env=CALM)
    try:
        proc = cluster.start("standalone", args=("--concurrency", "2"))
        wait_for("the run to succeed", lambda: sql(eng, "SELECT state FROM dag_run")[0][0] == "success", 90, cluster)
    finally:
        codes = cluster.stop()
    assert codes == {"standalone1": 0}, proc.log_text()[-3000:]
    jobs = sorted(tuple(r) for r in sql(eng, "SELECT kind, state FROM job"))
    assert jobs == [("scheduler", "success"), ("triggerer", "success"), ("worker", "success")], jobs
    assert sql(eng, "SELECT count(*) FROM task_instance_history WHERE state = 'success'")[0][0] == 2


class FakeTransport:
    """A broker that is up or down, and takes at most `room` messages per send."""

    def __init__(self):
        self.up, self.room, self.sent, self.closed = True, None, [], False

    def ready(self) -> bool:
        return self.up

    def send(self, rows) -> int:
        take = rows if self.room is None else rows[:self.room]
        self.sent += [(r["ti_id"], r["token"]) for r in take]
        return len(take)

    def close(self) -> None:
        self.closed = True


def test_dispatcher_broker_outage_keeps_tis_queued_and_resends_lost_messages(eng, cfg, tmp_path):
    from engine.executors import Dispatcher

    sync_source(eng, tmp_path / "dags", MIXED.replace('"a", bash_command="true"', '"a", bash_command="true", '
                                                                                     'executor="celery"'))
    trigger(eng, "mixed")
    t0 = sql(eng, "SELECT now()")[0][0]
    tick(eng, cfg, now=t0)
    broker = FakeTransport()
    d = Dispatcher(eng, cfg, "celery", broker)
    broker.up = False                                    # outage: nothing is marked, nothing lost
    assert d.run_once(now=t0) == {"sent": 0, "failed": 0, "broker": False}
    assert sql(eng, "SELECT count(*) FROM ti_dispatch")[0][0] == 0
    assert sql(eng, "SELECT state FROM task_instance WHERE task_id = 'a'")[0][0] == "queued"
    broker.up = True                                     # back: sent at once
    assert d.run_once(now=t0)["sent"] == 1 and len(broker.sent) == 1
    assert d.run_once(now=t0)["sent"] == 0               # in flight
    # the message was lost (or the dispatcher died before sending): re-sent after the timeout
    later = t0 + timedelta(seconds=cfg.dispatch_resend_timeout + 1)
    assert d.run_once(now=later)["sent"] == 1
    (ti, old), (_, new) = broker.sent
    assert old != new
    assert start(eng, ti, old, register(eng), later) == []
    assert len(start(eng, ti, new, register(eng), later)) == 1


def test_the_dispatcher_is_a_job_that_status_check_sees(eng, cfg, db_url, tmp_path):
    from click.testing import CliRunner

    from cli.main import main
    from engine.executors import Dispatcher

    def problems():
        r = CliRunner().invoke(main, ["--database-url", db_url, "status", "--check"], env={"ENGINE_DAGS_FOLDER": "/"})
        return [line.split(":")[0] for line in r.output.splitlines()]

    sync_source(eng, tmp_path / "dags", MIXED.replace('"a", bash_command="true"', '"a", bash_command="true", '
                                                                                     'executor="celery"'))
    trigger(eng, "mixed")
    tick(eng, cfg)
    assert sql(eng, "SELECT count(*) FROM task_instance WHERE state = 'queued' AND executor = 'celery'")[0][0] == 1
    assert "no_dispatcher" in problems()
    broker = FakeTransport()
    d = Dispatcher(eng, cfg, "celery", broker)
    seen: list = []

    def run_once(now=None):  # what status --check says while the dispatcher runs
        seen.append(problems())
        return {"sent": 0, "failed": 0, "broker": True}
    d.run_once = run_once
    d.loop(max_passes=1)
    assert "no_dispatcher" not in seen[0]  # live while it runs: kind dispatcher, job.queues = its executor
    assert [tuple(r) for r in sql(eng, "SELECT kind, queues, state FROM job WHERE id = :i", i=d.job.id)] == \
        [("dispatcher", "celery", "success")]
    assert "no_dispatcher" in problems() and broker.closed  # stopped: said again
