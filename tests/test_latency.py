"""Wake-ups and the zygote (issue 12): what makes work runnable wakes the services that act on
it (PostgreSQL LISTEN/NOTIFY, polling kept as the fallback), and tries forked from the
worker's warm zygote keep every guarantee of a try started in a fresh interpreter.

Timings are never asserted: a notification test waits for the wake-up with a timeout far
longer than the poll interval could explain only where the poll interval is set longer still.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from engine import db, wakeup, zygote
from engine.scheduler import Scheduler
from engine.worker import start_child, task_base_env
from tests.helpers import claim, sql, sync_source, tick, trigger

CHAIN = '''
from engine import DAG, BashTask
with DAG("wake_chain", schedule=None):
    BashTask("a", bash_command="true") >> BashTask("b", bash_command="true")
'''


def test_listener_is_woken_by_a_commit_and_not_by_a_rollback(eng, tmp_path, dialect):
    sync_source(eng, tmp_path, CHAIN)
    listener = wakeup.Listener(eng, "listen_scheduler")
    try:
        if dialect != "postgresql":  # no LISTEN: inert, the services poll
            assert not listener.open() and not listener.active
            assert listener.wait(0.01) is False
            return
        assert listener.open() and listener.active
        conn = eng.connect()
        with conn.begin() as tx:
            db.run(conn, "trigger_dag", dag_id="wake_chain", run_id="rolled_back", conf="{}", now=None)
            tx.rollback()
        conn.close()
        assert listener.wait(0.2) is False  # a rolled-back NOTIFY is never delivered
        trigger(eng, "wake_chain", "r1")
        assert listener.wait(60) is True
    finally:
        listener.close()


def test_a_finished_ti_wakes_the_idle_scheduler_which_queues_its_downstream(eng, cfg, tmp_path, dialect):
    if dialect != "postgresql":
        pytest.skip("MySQL/MariaDB have no LISTEN/NOTIFY: the scheduler polls (test_scheduling covers it)")
    sync_source(eng, tmp_path, CHAIN)
    trigger(eng, "wake_chain", "r1")
    tick(eng, cfg)
    (a,) = claim(eng)
    # Polling alone would take an hour: only the wake-up can queue b within the wait below.
    cfg.scheduler_interval = cfg.listen_poll_interval = cfg.heartbeat_interval = 3600.0
    cfg.job_heartbeat_threshold = 36000.0
    sched = Scheduler(eng, cfg)
    seen: list = []

    def finish_a_then_watch():  # the scheduler's loop needs the main thread (signal handlers)
        try:
            end = time.monotonic() + 120
            while sched.listener is None or not sched.listener.active:  # it idles, listening
                assert time.monotonic() < end
                time.sleep(0.02)
            with db.connect(eng) as conn:
                seen.append(db.run(conn, "finish_ti", ti_id=a.ti_id, try_number=a.try_number, exit_code=0,
                                   timed_out=False, reason=None, now=None).scalar_one())
            while sql(eng, "SELECT state FROM task_instance WHERE task_id = 'b'")[0][0] != "queued":
                assert time.monotonic() < end, "b was not queued: the scheduler was not woken"
                time.sleep(0.02)
            seen.append("b queued")
        finally:
            sched._stop = True
    helper = threading.Thread(target=finish_a_then_watch)
    helper.start()
    sched.loop()
    helper.join(60)
    assert seen == ["success", "b queued"]


# ---- the zygote (no database) ---------------------------------------------------------------------

def row(tmp_path, command: str, n: int = 1, **kw) -> dict:
    r = {"ti_id": n, "dag_id": "d", "run_id": "r", "task_id": f"t{n}", "map_index": -1, "try_number": 1,
         "kind": "bash", "bash_command": command, "env": None, "map_args": None, "python_callable": None,
         "op_kwargs": None, "fileloc": str(tmp_path / "dag.py"), "log_path": str(tmp_path / "logs" / f"t{n}.log"),
         "conf": {}}
    r.update(kw)
    return r


@pytest.fixture
def zyg(monkeypatch):
    monkeypatch.setenv("ENGINE_SECRET_FOR_TEST", "s3cret")
    z = zygote.Zygote(task_base_env(secrets=["s3cret"]))
    yield z
    z.close()


def wait(proc, timeout=60):
    try:
        return proc.wait(timeout=timeout)
    finally:
        proc.lifeline.close()


def test_a_forked_try_is_a_supervised_try_of_its_own(zyg, tmp_path):
    out = tmp_path / "out"
    r = row(tmp_path, f'echo "$ENGINE_TASK_ID $$ $(ps -o sid= -p $PPID) $PPID $(pwd)" > {out}; '
                      f'env > {out}.env; sleep 300 & echo $! > {out}.bg; exit 3')
    proc = start_child(r, base=task_base_env(secrets=["s3cret"]), zyg=zyg)
    assert isinstance(proc, zygote.ZygoteChild)
    assert wait(proc) == 3
    task_id, bash_pid, sid, ppid, cwd = out.read_text().split()
    assert task_id == "t1" and int(ppid) == proc.pid and int(sid) == proc.pid  # its own session, supervised
    assert cwd == str(tmp_path) and int(bash_pid) != proc.pid
    env = out.with_suffix(".env").read_text()
    assert "s3cret" not in env and "ENGINE_SECRET_FOR_TEST" not in env
    bg = int(out.with_suffix(".bg").read_text())
    end = time.monotonic() + 60
    while os.path.exists(f"/proc/{bg}") and open(f"/proc/{bg}/stat").read().rsplit(")", 1)[1].split()[0] not in "ZX":
        assert time.monotonic() < end, "the background process outlived its try"
        time.sleep(0.02)
    assert "engine worker: try 1 of d.t1" in (tmp_path / "logs" / "t1.log").read_text()


def test_a_forked_python_task_runs_the_runner_and_signals_reach_it(zyg, tmp_path):
    (tmp_path / "mod.py").write_text("import time\ndef f(x):\n    print('hello', x, flush=True)\n"
                                     "def slow():\n    time.sleep(300)\n")
    r = row(tmp_path, None, kind="python", python_callable="mod:f", op_kwargs={"x": 5})
    proc = start_child(r, base=task_base_env(), zyg=zyg)
    assert wait(proc) == 0
    assert "hello 5" in (tmp_path / "logs" / "t1.log").read_text()
    slow = start_child(row(tmp_path, None, n=2, kind="python", python_callable="mod:slow"), base=task_base_env(),
                       zyg=zyg)
    slow.send_signal(signal.SIGTERM)  # as the worker's execution_timeout does
    assert wait(slow) == -signal.SIGTERM


def test_closing_the_lifeline_kills_a_forked_try(zyg, tmp_path):
    proc = start_child(row(tmp_path, "sleep 300"), base=task_base_env(), zyg=zyg)
    proc.lifeline.close()  # what the worker's death does
    assert proc.wait(timeout=60) != 0


def test_when_the_zygote_dies_tries_start_the_old_way_and_running_ones_end(zyg, tmp_path):
    running = start_child(row(tmp_path, "sleep 0.5; exit 4"), base=task_base_env(), zyg=zyg)
    os.kill(zyg.pid, signal.SIGKILL)
    status = wait(running)
    assert status in (4, 1)  # its own status when the zygote reported it, else "unknown" (1)
    nxt = start_child(row(tmp_path, "exit 5", n=2), base=task_base_env(), zyg=zyg)
    assert not isinstance(nxt, zygote.ZygoteChild) and zyg.dead
    assert wait(nxt) == 5


def test_a_try_the_zygote_never_answered_for_starts_the_old_way(zyg, tmp_path):
    """The worker does not wait for the zygote's answer (it sends every claimed try at once);
    when the zygote dies before it answered, that try starts in a fresh interpreter."""
    os.kill(zyg.pid, signal.SIGSTOP)  # it cannot answer
    proc = start_child(row(tmp_path, "echo ran-$((1+1)); exit 6"), base=task_base_env(), zyg=zyg)
    assert isinstance(proc, zygote.ZygoteChild) and proc.pending and proc.poll() is None
    os.kill(zyg.pid, signal.SIGKILL)
    assert wait(proc) == 6 and proc.popen is not None and zyg.dead
    log = (tmp_path / "logs" / "t1.log").read_text()
    assert log.count("ran-2") == 1 and log.count("engine worker: try 1 of d.t1") == 1


def test_a_missing_dag_folder_fails_to_start_as_without_the_zygote(zyg, tmp_path):
    r = row(tmp_path, "true", fileloc=str(tmp_path / "gone" / "dag.py"))
    with pytest.raises(FileNotFoundError):
        start_child(r, base=task_base_env(), zyg=zyg)


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfds and the zygote: Linux only")


def test_polling_without_notifications_looks_again_soon_after_work_then_backs_off():
    """wakeup.Backoff (MariaDB's scheduler and worker loops): FIRST after a pass that did work,
    doubling up to the idle interval while nothing happens, never above it."""
    from engine.wakeup import Backoff

    poll = Backoff()
    poll.note(True)
    waits = [poll.next(1.0) for _ in range(7)]
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    poll.note(False)                 # an idle pass changes nothing
    assert poll.next(1.0) == 1.0
    poll.note(True)                  # work again: soon again
    assert poll.next(1.0) == 0.05
    assert poll.next(0.02) == 0.02   # never above the service's own interval


def test_idle_services_without_notifications_back_off_to_listen_poll_interval(eng, cfg, monkeypatch):
    """MariaDB (or PostgreSQL while LISTEN is lost): an idle scheduler and worker poll 50 ms after
    work, doubling past their own interval up to listen_poll_interval (an idle deployment then
    costs a few statements per second, as a listening one does), never beyond the heartbeat."""
    from engine.worker import Worker

    monkeypatch.setattr(wakeup.Listener, "open", lambda self: False)   # no notifications
    cfg.scheduler_interval, cfg.worker_poll_interval, cfg.listen_poll_interval = 0.1, 0.1, 0.4
    sched, waits = Scheduler(eng, cfg), []
    monkeypatch.setattr(sched, "_wait", lambda seconds: waits.append(seconds) or False)
    sched.loop(max_ticks=7)                                            # seven idle passes
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.4, 0.4, 0.4]

    worker = Worker(eng, cfg)
    worker.listener = wakeup.Listener(eng, "listen_worker")
    timeouts = []
    monkeypatch.setattr(worker.listener, "wait", lambda timeout, *a, **k: timeouts.append(timeout) or False)
    for _ in range(5):
        worker._wait()
    assert timeouts == [0.05, 0.1, 0.2, 0.4, 0.4]
    cfg.listen_poll_interval = 3600.0                                  # the heartbeat still comes first
    for _ in range(8):
        worker._wait()
    assert timeouts[-1] == timeouts[-2] == worker.job.heartbeat_interval < 3600.0
