"""Priority that acts (issue 13, sections 1 and 2), on both dialects: preemption end to end
through a real worker, the race test with preemption on, a wide TI served by its reservation,
and aging; each starvation shown first without the feature. docs/priority.md."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa

from engine import db
from engine.config import load_config
from engine.scheduler import Scheduler, queue_knobs
from engine.worker import Worker
from tests.helpers import alive, claim, sql, sync_source, tick, trigger, until
from tests.race import race, setup_world
from tests.reference import TI, Reservation, World
from tests.stack import stack  # noqa: F401 - the fixture
from tests.world import T0, load_world

PREEMPT = """
from engine import DAG, BashTask
with DAG("low", is_paused_upon_creation=False):
    # Two processes: the task's tree must be gone before its slot is reused.
    BashTask("l", pool="gpu", priority_weight=1, preemptible=True,
             bash_command="sleep 600 & echo $$ $! > {pids}; if [ -f {marker} ]; then echo done; else wait; fi")
with DAG("high", is_paused_upon_creation=False):
    BashTask("h", pool="gpu", priority_weight=100, bash_command="echo high ran")
"""


def ti(eng, dag_id):
    return sql(eng, "SELECT * FROM task_instance WHERE dag_id = :d", d=dag_id)[0]


def state(eng, dag_id):
    rows = sql(eng, "SELECT state FROM task_instance WHERE dag_id = :d", d=dag_id)
    return rows[0].state if rows else None


def test_a_high_priority_ti_preempts_a_long_low_priority_try(eng, cfg, tmp_path):
    from cli.main import main as engine_cli
    from click.testing import CliRunner
    url = cfg.database_url
    out = CliRunner().invoke(engine_cli, ["pools", "set", "gpu", "1", "--preempt-margin", "10"],
                             env={"ENGINE_DATABASE_URL": url})
    assert out.exit_code == 0 and "preemptible (margin 10)" in out.output, out.output
    bad = CliRunner().invoke(engine_cli, ["pools", "set", "gpu", "1", "--preempt-margin", "-3"],
                             env={"ENGINE_DATABASE_URL": url})
    assert bad.exit_code != 0 and "--preempt-margin must be from 0" in bad.output
    assert sql(eng, "SELECT preempt_margin FROM pool WHERE name = 'gpu'")[0][0] == 10  # unchanged
    pids, marker = tmp_path / "pids", tmp_path / "go"
    sync_source(eng, tmp_path / "dags", PREEMPT.format(pids=pids, marker=marker))
    cfg = load_config({"database_url": url, "home": cfg.home, "preempt_min_runtime": 0.0})
    sched, worker = Scheduler(eng, cfg), Worker(eng, cfg)
    try:
        trigger(eng, "low", "r1")
        until(lambda: (sched.run_once(), worker.run_once()),
              lambda: state(eng, "low") == "running" and pids.exists() and len(pids.read_text().split()) == 2,
              "the low-priority try runs")
        tree = [int(p) for p in pids.read_text().split()]
        assert all(alive(p) for p in tree)

        # The high-priority TI arrives; the pool is full: one pass preempts the low one for it.
        trigger(eng, "high", "r1")
        until(sched.run_once, lambda: state(eng, "low") == "preempting", "the low try is preempted")
        low, high = ti(eng, "low"), ti(eng, "high")
        assert high.state == "scheduled" and low.preempted_for == high.id
        assert low.state_reason == f"preempted for TI {high.id} (priority 100)"
        reason = sql(eng, "SELECT reason FROM pending_reasons WHERE ti_id = :i", i=high.id)[0][0]
        assert reason == "waiting for 1 preempted TI(s) to stop"
        assert sql(eng, "SELECT reason FROM pool_reservation WHERE ti_id = :i", i=high.id)[0][0] == "preemption"
        sched.run_once()
        assert ti(eng, "high").state == "scheduled"  # its slot is still held by the stopping try

        # The worker sees it at its next heartbeat, stops the tree (SIGTERM; SIGKILL after the
        # grace), and the TI goes back to scheduled once the worker no longer runs it.
        worker.job.heartbeat_interval = 0
        until(worker.run_once, lambda: state(eng, "low") == "scheduled", "the preempted try is back")
        assert not any(alive(p) for p in tree)  # the whole tree is gone before the slot is reused
        # One pass: the high TI takes the freed (reserved) slot; the low one waits.
        sched.run_once()
        assert (ti(eng, "high").state, ti(eng, "low").state) == ("queued", "scheduled")
        assert sql(eng, "SELECT count(*) FROM pool_reservation")[0][0] == 0
        marker.write_text("go")
        until(lambda: (sched.run_once(), worker.run_once()),
              lambda: state(eng, "high") == "success" and state(eng, "low") == "success", "both succeed")
    finally:
        worker.stop()
        sched.stop()
    low = ti(eng, "low")
    assert (low.try_number, low.max_tries) == (2, 1)  # the preemption used no retry (retries=0)
    tries = sql(eng, "SELECT try_number, state FROM task_instance_history WHERE ti_id = :i ORDER BY try_number",
                i=low.id)
    assert [tuple(t) for t in tries] == [(1, "preempted"), (2, "success")]
    moves = sql(eng, "SELECT action, from_state, to_state FROM state_change WHERE ti_id = :i ORDER BY id", i=low.id)
    assert [tuple(m) for m in moves] == [("preempt", "running", "preempting"), ("preempted", "preempting", "scheduled")]
    assert sql(eng, "SELECT sum(tis_preempted) FROM tick_log")[0][0] == 1


def _preempting(eng, cfg, tmp_path):
    """The low TI running in a 1-slot preemptible pool, preempted for the high TI by one pass:
    (scheduler, worker, the low try's process tree, the marker that lets it end)."""
    sql(eng, "INSERT INTO pool (name, slots, include_deferred, preempt_margin) VALUES ('gpu', 1, :f, 10)", f=False)
    pids, marker = tmp_path / "pids", tmp_path / "go"
    sync_source(eng, tmp_path / "dags", PREEMPT.format(pids=pids, marker=marker))
    cfg = load_config({"database_url": cfg.database_url, "home": cfg.home, "preempt_min_runtime": 0.0})
    sched, worker = Scheduler(eng, cfg), Worker(eng, cfg)
    trigger(eng, "low", "r1")
    until(lambda: (sched.run_once(), worker.run_once()),
          lambda: state(eng, "low") == "running" and pids.exists() and len(pids.read_text().split()) == 2,
          "the low-priority try runs")
    trigger(eng, "high", "r1")
    until(sched.run_once, lambda: state(eng, "low") == "preempting", "the low try is preempted")
    worker.job.heartbeat_interval = 0
    return sched, worker, [int(p) for p in pids.read_text().split()], marker


# action: the operator's command; ends: the low TI's state once its try has stopped, and the
# (action, from, to) state_change row it wrote; history: the ended try's history state.
OPERATOR = {
    "cancel": (["runs", "cancel", "low", "r1"], "failed", ("cancel", "preempting", "failed"), "failed"),
    "mark_failed": (["runs", "mark", "failed", "low", "r1"], "failed", ("mark_failed", "preempting", "failed"),
                    "failed"),
    "kill": (["tasks", "kill", "low", "r1", "l"], "failed", ("kill", "preempting", "failed"), "failed"),
    "mark_success": (["tasks", "mark", "success", "low", "r1", "l"], "success",
                     ("mark_success", "preempting", "success"), "success"),
    "clear": (["tasks", "clear", "low", "--run", "r1", "--yes"], "none", ("clear", "preempting", "restarting"),
              "failed"),
}


@pytest.mark.parametrize("action", list(OPERATOR))
def test_an_operator_ends_a_preempting_ti(eng, cfg, tmp_path, action):
    """issue 13: cancel / mark / kill / clear while the TI is `preempting`: it ends as asked,
    heartbeat_v3 never puts it back to `scheduled`, the high TI gets the slot, no reservation left."""
    from cli.main import main as engine_cli
    from click.testing import CliRunner
    args, ends, change, history = OPERATOR[action]
    sched, worker, tree, marker = _preempting(eng, cfg, tmp_path)
    try:
        low = ti(eng, "low")
        out = CliRunner().invoke(engine_cli, ["--database-url", cfg.database_url, *args])
        assert out.exit_code == 0, out.output
        # the worker's heartbeat stops the try; once it no longer runs it, the TI stays as asked
        until(worker.run_once, lambda: not worker.children, "the worker stopped the preempted try")
        worker.run_once()  # one more heartbeat without the try: restarting -> none for a clear
        assert not any(alive(p) for p in tree)
        assert state(eng, "low") == ends
        until(sched.run_once, lambda: state(eng, "high") in ("queued", "running", "success"), "high is queued")
        assert sql(eng, "SELECT count(*) FROM pool_reservation")[0][0] == 0
        tries = sql(eng, "SELECT try_number, state FROM task_instance_history WHERE ti_id = :i", i=low.id)
        assert [tuple(t) for t in tries] == [(1, history)]  # one ended try, never 'preempted'
        moves = [tuple(m) for m in sql(eng, "SELECT action, from_state, to_state FROM state_change "
                                            "WHERE ti_id = :i ORDER BY id", i=low.id)]
        assert moves[:2] == [("preempt", "running", "preempting"), change]
        assert not any(m[0] == "preempted" for m in moves)
        if action == "clear":
            assert moves[2] == ("restarted", "restarting", "none")
        if action in ("cancel", "mark_failed"):
            assert sql(eng, "SELECT state FROM dag_run WHERE dag_id = 'low'")[0][0] == "failed"
    finally:
        worker.stop()
        sched.stop()


def test_cancelling_the_waiting_run_drops_its_reservation(eng, cfg, tmp_path):
    """The TI a victim was preempted for stops waiting (its run is cancelled): its reservation
    goes at once; the victim's try, already told to stop, goes back to `scheduled` (no retry
    used) and takes the slot again."""
    from cli.main import main as engine_cli
    from click.testing import CliRunner
    sched, worker, tree, marker = _preempting(eng, cfg, tmp_path)
    try:
        high = ti(eng, "high")
        out = CliRunner().invoke(engine_cli, ["--database-url", cfg.database_url, "runs", "cancel", "high", "r1"])
        assert out.exit_code == 0, out.output
        assert ti(eng, "high").state == "skipped"
        assert sql(eng, "SELECT count(*) FROM pool_reservation WHERE ti_id = :i", i=high.id)[0][0] == 0
        until(worker.run_once, lambda: state(eng, "low") == "scheduled", "the preempted try is back")
        marker.write_text("go")
        until(lambda: (sched.run_once(), worker.run_once()), lambda: state(eng, "low") == "success", "low succeeds")
    finally:
        worker.stop()
        sched.stop()
    assert sql(eng, "SELECT count(*) FROM pool_reservation")[0][0] == 0


def test_racing_schedulers_with_preemption_keep_every_limit_and_run_no_try_twice(eng, db_url):
    setup_world(eng, n_tis=400, preempt=True)
    result = race(db_url, seconds=8, schedulers=4, completers=2, preempt=True,
                  enough="SELECT (SELECT count(*) FROM state_change WHERE action = 'preempt') > 0 "
                         "AND (SELECT count(*) FROM task_instance WHERE state = 'success') > 50")
    assert result["exit_codes"] == [0] * 6
    assert result["violations"] == []                          # limit_usage, after every step
    assert result["claimed"] == result["distinct_claimed"] > 50  # no (TI, try) claimed twice
    assert result["preempted"] > 0
    with eng.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM limit_usage WHERE used > cap")).scalar() == 0
        assert c.execute(sa.text("SELECT * FROM usage_drift")).all() == []  # the counters kept up
        # every preempted try went back through heartbeat_v3 or still holds its place
        assert c.execute(sa.text("SELECT count(*) FROM state_change WHERE action = 'preempt'")).scalar() \
            == result["preempted"]


VICTIMS = """
from engine import DAG, BashTask
with DAG("low", is_paused_upon_creation=False, max_active_tasks=None):
    for i in range(2):
        BashTask(f"l{i}", pool="gpu", priority_weight=1, preemptible=True, bash_command="true")
with DAG("high", is_paused_upon_creation=False):
    BashTask("h", pool="gpu", priority_weight=100, bash_command="true")
"""


def _preempt(eng, conn=None):
    def call(c):
        return [tuple(r) for r in db.run(c, "preempt", now=None, cooldown=0, max_per_pass=10, min_runtime=0).all()]
    if conn is not None:
        return call(conn)
    with db.connect(eng) as c:
        return call(c)


def test_preempt_does_not_wait_for_a_victim_a_heartbeat_holds(eng, cfg, tmp_path, dialect):
    """MySQL/MariaDB (preempt_v3): a worker's heartbeat holds its running TIs' rows until it
    commits; preempt takes its victims' locks without waiting (SKIP LOCKED), so a held victim
    ends the pass with nothing moved (preempt_v2 waited, and could close a lock cycle with the
    heartbeat), and the next pass preempts once the heartbeat has committed."""
    if dialect == "postgresql":
        pytest.skip("PostgreSQL's preempt waits for its victims' row locks, taken in id order (preempt_v1)")
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('gpu', 2, false)")
    sync_source(eng, tmp_path / "dags", VICTIMS)
    trigger(eng, "low", "r1")
    tick(eng, cfg)
    with db.connect(eng) as c:
        job = db.run(c, "register_job", kind="worker", hostname="w", pid=1).scalar_one()
    low = claim(eng)
    assert len(low) == 2
    sql(eng, "UPDATE task_instance SET worker_job_id = :j WHERE dag_id = 'low'", j=job)
    trigger(eng, "high", "r1")
    tick(eng, cfg)
    assert state(eng, "high") == "scheduled"  # the pool is full and preemption is still off
    sql(eng, "UPDATE pool SET preempt_margin = 10 WHERE name = 'gpu'")

    hb = eng.connect()  # the heartbeat's statement (heartbeat_v3), not committed yet
    tx = hb.begin()
    hb.execute(sa.text("UPDATE task_instance SET last_heartbeat_at = last_heartbeat_at "
                       "WHERE worker_job_id = :j AND state = 'running'"), {"j": job})
    try:
        with eng.connect() as c:
            c.execute(sa.text("SET SESSION innodb_lock_wait_timeout = 5"))
            c.commit()
            with c.begin():
                assert _preempt(eng, c) == []  # no wait: the pass ends, nothing moved
        assert sql(eng, "SELECT count(*) FROM pool_reservation")[0][0] == 0
        assert sorted(r.state for r in sql(eng, "SELECT state FROM task_instance WHERE dag_id = 'low'")) \
            == ["running", "running"]
    finally:
        tx.commit()
        hb.close()
    moved = _preempt(eng)  # the heartbeat has committed: the next pass preempts one victim
    high = ti(eng, "high")
    assert len(moved) == 1 and moved[0][1] == high.id
    assert sql(eng, "SELECT reason FROM pool_reservation WHERE ti_id = :i", i=high.id)[0][0] == "preemption"


@pytest.mark.parametrize("action, final", [("mark_success", "success"), ("mark_failed", "failed")])
def test_a_heartbeat_and_an_operators_change_of_a_preempting_ti_at_once(eng, action, final):
    """The worker's heartbeat no longer lists the preempted try while an operator's mark of that
    TI is open: the heartbeat waits for it and then leaves the TI as marked. (MySQL/MariaDB's
    heartbeat_v3 read the TI `preempting` without a lock, waited in its final UPDATE and then put
    the marked TI back to `scheduled`, to run again; heartbeat_v4, revision 0046, locks it as it
    picks it, as PostgreSQL's v3 does.)"""
    from tests.helpers import start_in_thread, until_waiting_or_done
    load_world(eng, _world(1, [TI(1, "d", 1, "t", 0, "running", 1, "p", 1)]))
    with db.connect(eng) as c:
        job = db.run(c, "register_job", kind="worker", hostname="w", pid=1).scalar_one()
    sql(eng, "UPDATE task_instance SET state = 'preempting', worker_job_id = :j WHERE id = 1", j=job)
    operator = eng.connect()
    tx = operator.begin()
    db.run(operator, "set_ti_state", dag_id="d", run_id="run1", task_id="t", map_index=None, new_state=final,
           action=action, reason=None, now=None).all()
    outcome: dict = {}
    try:
        hb = start_in_thread(eng, lambda c: db.run(c, "worker_heartbeat", job_id=job, running="[]", now=None).all(),
                             outcome, "hb")
        until_waiting_or_done(eng, hb, outcome, "hb_pid")
        tx.commit()
    finally:
        operator.close()
        hb.join(60)
    assert not isinstance(outcome.get("hb"), Exception), outcome
    row = sql(eng, "SELECT state, max_tries FROM task_instance WHERE id = 1")[0]
    assert tuple(row) == (final, 0), outcome
    moves = sql(eng, "SELECT action, from_state, to_state FROM state_change WHERE ti_id = 1 ORDER BY id")
    assert [tuple(m) for m in moves] == [(action, "preempting", final)]


def test_a_ti_cleared_while_a_heartbeat_picks_its_restarting_tis_is_moved_with_its_row(eng):
    """A heartbeat writes a state_change row for every TI it moves. Here its pick waits for a
    restarting TI (2) that another transaction holds while an operator clears the job's
    preempting TI (1): each TI's rows must chain from its state before to its state after.
    (MySQL/MariaDB's heartbeat_v4 wrote the `restarted` rows from one locking read and moved
    the TIs by a second read: TI 1, cleared to `restarting` in between, went to `none` without
    its row. heartbeat_v5, revision 0056, moves only the TIs its one pick took.)"""
    from tests.helpers import start_in_thread, until_waiting_or_done
    world = World(pools={"p": (4, False), "default_pool": (128, False)}, parallelism={"default": None},
                  dags={"d": (None, False), "e": (None, False)},
                  tasks={("d", "t"): (None, None), ("e", "t"): (None, None)},
                  runs={1: ("d", "running", 0), 2: ("e", "running", 0)},
                  tis=[TI(1, "d", 1, "t", 0, "running", 1, "p", 1), TI(2, "e", 2, "t", 0, "running", 1, "p", 1)])
    load_world(eng, world)
    with db.connect(eng) as c:
        job = db.run(c, "register_job", kind="worker", hostname="w", pid=1).scalar_one()
    sql(eng, "UPDATE task_instance SET worker_job_id = :j, state = CASE WHEN id = 1 THEN 'preempting' "
             "ELSE 'restarting' END", j=job)

    def heartbeat(c):
        return db.run(c, "worker_heartbeat", job_id=job, running="[]", now=None).all()

    def clear(c):
        return db.run(c, "clear_tis", dag_id="d", run_id=None, task_regex=None, downstream=False, upstream=False,
                      only_failed=False, dry_run=False, reason=None, now=None).all()
    holder = eng.connect()   # a transaction holding TI 2 (a report of its try, say)
    held = holder.begin()
    holder.execute(sa.text("SELECT id FROM task_instance WHERE id = 2 FOR UPDATE")).all()
    outcome: dict = {}
    threads = []
    try:
        threads.append(start_in_thread(eng, heartbeat, outcome, "hb"))
        assert until_waiting_or_done(eng, threads[0], outcome, "hb_pid"), outcome
        # the clear finishes, or waits for the heartbeat when its pick holds TI 1 (v5)
        threads.append(start_in_thread(eng, clear, outcome, "clear"))
        until_waiting_or_done(eng, threads[1], outcome, "clear_pid")
        held.commit()
    finally:
        holder.close()
        for t in threads:
            t.join(60)
    # On MySQL/MariaDB (v5) the clear, waiting for TI 1 that the heartbeat's pick holds, ends in
    # a deadlock with it (the clear's read holds TI 1's index entry that the heartbeat's UPDATE
    # must change). InnoDB rolls one back whole (the clear, so far): it runs again, as the CLI
    # tells an operator and as a worker heartbeats again.
    for key, again in (("hb", heartbeat), ("clear", clear)):
        if db.is_transient(outcome.get(key)):
            with db.connect(eng) as c:
                outcome[key] = again(c)
    assert not any(isinstance(v, Exception) for v in outcome.values()), outcome
    if state(eng, "d") == "restarting":   # cleared after the pick: the next heartbeat moves it
        with db.connect(eng) as c:
            heartbeat(c)
    for dag_id, ti_id, before in (("d", 1, "preempting"), ("e", 2, "restarting")):
        moves = [tuple(m) for m in sql(eng, "SELECT from_state, to_state FROM state_change WHERE ti_id = :i "
                                            "ORDER BY id", i=ti_id)]
        chain = [before] + [m[1] for m in moves]
        assert [m[0] for m in moves] == chain[:-1] and chain[-1] == state(eng, dag_id), (ti_id, moves)
    assert state(eng, "e") == "none" and state(eng, "d") == "none"


# --- wide TIs and aging: the queue_tis named query on worlds written directly ----------------

def _world(pool_slots: int, tis: list[TI]) -> World:
    return World(pools={"p": (pool_slots, False), "default_pool": (128, False)}, parallelism={"default": None},
                 dags={"d": (None, False)}, tasks={("d", "t"): (None, None)}, runs={1: ("d", "running", 0)}, tis=tis)


def _queue(eng, minute: int, **knobs) -> list[int]:
    with db.connect(eng) as c:
        return [r.ti_id for r in db.run(c, "queue_tis", max_tis=10, job_id=None, now=T0 + timedelta(minutes=minute),
                                         **{**queue_knobs(), **knobs}).all()]


def _add(eng, ti_id: int, priority: int, minute: int, pool_slots: int = 1) -> None:
    sql(eng, "INSERT INTO task_instance (id, dag_run_id, dag_id, run_id, task_id, map_index, state, priority_weight, "
             "pool, pool_slots, queue, executor, run_after, updated_at) VALUES (:id, 1, 'd', 'run1', 't', :id, "
             "'scheduled', :pw, 'p', :ps, 'default', 'default', :ra, :at)",
        id=ti_id, pw=priority, ps=pool_slots, ra=T0, at=T0 + timedelta(minutes=minute))


def _finish_oldest(eng) -> None:
    """One queued TI (the lowest id) ends: its slots free up."""
    oldest = sql(eng, "SELECT min(id) FROM task_instance WHERE state = 'queued'")[0][0]
    sql(eng, "UPDATE task_instance SET state = 'success' WHERE id = :i", i=oldest)


def _stream(eng, rounds: int, wide: int, **knobs) -> int | None:
    """A 4-slot pool full of 1-slot TIs of priority 5, one ending and one arriving every minute,
    and TI `wide` waiting (4 slots wide, or priority 1). The minute `wide` is queued, or None."""
    next_id = 100
    for minute in range(1, rounds + 1):
        _finish_oldest(eng)
        _add(eng, next_id, 5, minute)
        next_id += 1
        if wide in _queue(eng, minute, **knobs):
            return minute
    return None


@pytest.mark.parametrize("reserve_after", [0, 120], ids=["off", "reserve_after"])
def test_a_wide_ti_is_served_by_a_reservation(eng, reserve_after):
    narrow = [TI(i, "d", 1, "t", i, "queued", 5, "p", 1, since=0) for i in range(1, 5)]
    narrow += [TI(i, "d", 1, "t", i, "scheduled", 5, "p", 1, since=0) for i in range(5, 9)]
    load_world(eng, _world(4, narrow + [TI(50, "d", 1, "t", 50, "scheduled", 5, "p", 4, since=0)]))
    served = _stream(eng, 20, wide=50, reserve_after=reserve_after)
    if not reserve_after:
        assert served is None  # greedy: every freed slot goes to a narrow TI of equal priority
        return
    # waited 120 s at minute 2: reserved; the next four freed slots are kept for it.
    assert served is not None and served <= 2 + 4
    queued = sql(eng, "SELECT count(*) FROM task_instance WHERE state = 'queued' AND pool_slots = 1")[0][0]
    assert queued == 0  # the freed slots went to nobody else


@pytest.mark.parametrize("aging", [0, 1], ids=["off", "aging"])
def test_aging_serves_a_low_priority_ti_under_constant_high_priority_load(eng, aging):
    busy = [TI(i, "d", 1, "t", i, "queued", 5, "p", 1, since=0) for i in range(1, 5)]
    load_world(eng, _world(4, busy + [TI(50, "d", 1, "t", 50, "scheduled", 1, "p", 1, since=0)]))
    served = _stream(eng, 20, wide=50, aging_rate=aging, aging_cap=100)
    if not aging:
        assert served is None  # starves: a priority-5 TI arrives for every freed slot
    else:
        assert served is not None and served <= 6  # 1 + 1 point/minute overtakes 5 after 5 minutes


@pytest.mark.parametrize("reserved", [False, True], ids=["free", "reserved"])
def test_pending_reasons_names_slots_reserved_for_other_tis(eng, reserved):
    """A narrow TI whose pool's free slots are kept for a wide TI is not `runnable`: it says
    so, and queue_tis_v4 indeed leaves it (revision 0016)."""
    busy = [TI(i, "d", 1, "t", i, "queued", 5, "p", 1, since=0) for i in (1, 2)]
    waiting = [TI(50, "d", 1, "t", 50, "scheduled", 5, "p", 4, since=0),
               TI(60, "d", 1, "t", 60, "scheduled", 9, "p", 1, since=0)]
    w = _world(4, busy + waiting)
    if reserved:
        w.reservations = [Reservation(50, "p", 4, "wide", 0)]
    load_world(eng, w)
    reasons = dict(sql(eng, "SELECT ti_id, reason FROM pending_reasons"))
    if not reserved:
        assert reasons == {50: "pool full", 60: "runnable"}
        assert _queue(eng, 1) == [60]
        return
    assert reasons == {50: "slots reserved for it", 60: "slots reserved for 1 other TI(s)"}
    assert _queue(eng, 1) == []  # the view and queue_tis_v4 agree: the two free slots are held
    _finish_oldest(eng)
    _finish_oldest(eng)
    reasons = dict(sql(eng, "SELECT ti_id, reason FROM pending_reasons"))
    assert reasons == {50: "runnable", 60: "slots reserved for 1 other TI(s)"}
    assert _queue(eng, 2) == [50]
    assert dict(sql(eng, "SELECT ti_id, reason FROM pending_reasons")) == {60: "pool full"}


STEADY = """
    with DAG("low", max_active_tasks=None):
        PythonTask("l", python_callable="seedtasks:steady", op_kwargs={"started": "%(started)s", "fire": "%(fire)s"},
                   pool="gpu", priority_weight=1, preemptible=True)
    with DAG("high", max_active_tasks=None):
        BashTask("h", pool="gpu", priority_weight=100, bash_command="echo high ran")
"""


@pytest.mark.parametrize("include_deferred", [False, True], ids=["deferred", "include_deferred"])
def test_a_preempted_task_that_defers_on_sigterm_keeps_its_progress(eng, stack, tmp_path, include_deferred):
    """issue 13: a task whose SIGTERM handler raises Defer, preempted, ends `deferred` with its
    progress (next_kwargs) and resumes through its trigger, in the same try, no retry used. In
    an include_deferred pool the deferred TI would keep the very slot it was preempted for: its
    Defer is refused and it goes back to `scheduled` like any victim (docs/priority.md)."""
    started, fire = tmp_path / "started", tmp_path / "fire"
    sql(eng, "INSERT INTO pool (name, slots, include_deferred, preempt_margin) VALUES ('gpu', 1, :i, 10)",
        i=include_deferred)
    s = stack(STEADY % {"started": started, "fire": fire}, preempt_min_runtime=0.0)
    trigger(eng, "low", "r1")
    s.until(lambda: state(eng, "low") == "running" and started.exists(), "the low try runs, its handler installed")
    trigger(eng, "high", "r1")
    s.until(lambda: state(eng, "high") == "success", "high preempts and succeeds")
    low = ti(eng, "low")
    moves = [tuple(m) for m in sql(eng, "SELECT action, from_state, to_state FROM state_change WHERE ti_id = :i "
                                        "ORDER BY id", i=low.id)]
    if include_deferred:
        assert moves == [("preempt", "running", "preempting"), ("preempted", "preempting", "scheduled")]
        assert low.next_kwargs is None and low.trigger_id is None
    else:
        assert moves == [("preempt", "running", "preempting"), ("preempted", "preempting", "deferred")]
        kept = low.next_kwargs if isinstance(low.next_kwargs, dict) else json.loads(low.next_kwargs)
        assert low.state == "deferred" and low.next_method == "go_on" and kept["step"] > 0
        step = kept["step"]
    fire.write_text("go")
    s.until(lambda: state(eng, "low") == "success", "low ends")
    low = ti(eng, "low")
    result = sql(eng, "SELECT value FROM task_results WHERE ti_id = :i", i=low.id)[0][0]
    result = json.loads(result) if isinstance(result, str) else result
    tries = [tuple(t) for t in sql(eng, "SELECT try_number, state FROM task_instance_history WHERE ti_id = :i "
                                        "ORDER BY try_number", i=low.id)]
    if include_deferred:
        assert tries == [(1, "preempted"), (2, "success")] and result["resumed"] is False
    else:
        assert tries == [(1, "success")] and (low.try_number, low.max_tries) == (1, 0)  # one try, no retry used
        assert result == {"steps": step, "resumed": True}  # the progress made before the preemption
    assert sql(eng, "SELECT count(*) FROM pool_reservation")[0][0] == 0
