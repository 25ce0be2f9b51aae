"""reset_orphans_v1, requeue_stuck_v1, release_ti_v1 and the scheduler steps that call them,
at the procedure level with an injected clock (`now`): dead jobs, adopted queues, orphaned
tries, the once-per-interval stamp and its NOWAIT lock, stuck queue entries, hand-backs."""
from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from engine import db, migrate, procedures
from engine.scheduler import queue_knobs
from engine.scheduler import Scheduler, format_summary
from tests.helpers import sql, sync_source, tick, trigger

THRESHOLD, INTERVAL = 60.0, 10.0

DAG_SOURCE = """
    with DAG("d", max_active_tasks=10):
        for i in range(4):
            BashTask(f"t{i}", bash_command="true", retries=1, retry_delay=0)
"""


@pytest.fixture
def world(eng, cfg, tmp_path):
    """A DAG with one started run of four scheduled TIs (not queued yet) and no orphan check
    done; returns the database clock at setup."""
    sync_source(eng, tmp_path / "dags", DAG_SOURCE)
    trigger(eng, "d")
    tick(eng, cfg)
    sql(eng, "UPDATE task_instance SET state = 'scheduled', queued_at = NULL, queued_by_job_id = NULL")
    sql(eng, "UPDATE scheduler_lock SET last_run_at = NULL")
    return sql(eng, "SELECT now()")[0][0]


def register(eng, kind: str) -> int:
    with db.connect(eng) as conn:
        return db.run(conn, "register_job", kind=kind, hostname="h", pid=1).scalar_one()


def beat(eng, job_id: int, now) -> bool:
    with db.connect(eng) as conn:
        return db.run(conn, "heartbeat", job_id=job_id, now=now).scalar_one()


def queue(eng, job_id: int, now, max_tis: int = 1000) -> list:
    with db.connect(eng) as conn:
        return db.run(conn, "queue_tis", max_tis=max_tis, job_id=job_id, now=now, **queue_knobs()).all()


def claim(eng, job_id, limit: int, now) -> list:
    with db.connect(eng) as conn:
        return db.run(conn, "claim_tis", job_id=job_id, hostname="h", queues=["default"], limit=limit,
                      log_dir="/tmp/engine-test-logs", now=now).all()


def reset(eng, job_id, now, threshold=THRESHOLD, interval=INTERVAL):
    with db.connect(eng) as conn:
        return db.run(conn, "reset_orphans", threshold=threshold, interval=interval, job_id=job_id, now=now).one()


def requeue(eng, now, timeout=600.0, max_requeues=2):
    with db.connect(eng) as conn:
        return db.run(conn, "requeue_stuck", timeout=timeout, max_requeues=max_requeues, now=now).one()


def release(eng, ti_id, try_number, now, reason="worker shut down"):
    with db.connect(eng) as conn:
        return db.run(conn, "release_ti", ti_id=ti_id, try_number=try_number, reason=reason, now=now).scalar()


def tis(eng) -> dict:
    rows = sql(eng, "SELECT id, task_id, state, try_number, max_tries, queued_by_job_id, worker_job_id, "
                    "requeue_count, state_reason FROM task_instance ORDER BY id")
    return {r.task_id: r for r in rows}


def history(eng) -> list:
    return sql(eng, "SELECT ti_id, try_number, state, start_date, end_date, reason FROM task_instance_history "
                    "ORDER BY id")


def job_states(eng) -> dict:
    return {r.id: r.state for r in sql(eng, "SELECT id, state FROM job")}


def test_dead_jobs_are_failed_and_only_their_work_is_touched(eng, world):
    t0 = world
    dead_sched, live_sched = register(eng, "scheduler"), register(eng, "scheduler")
    dead_worker, live_worker, me = register(eng, "worker"), register(eng, "worker"), register(eng, "scheduler")
    assert beat(eng, dead_sched, t0) and beat(eng, dead_worker, t0)  # register_job stamped the real clock
    queue(eng, me, t0, max_tis=2)
    (run_dead,) = claim(eng, dead_worker, 1, t0)
    (run_live,) = claim(eng, live_worker, 1, t0)
    queued_dead = queue(eng, dead_sched, t0, max_tis=1)
    queued_live = queue(eng, live_sched, t0, max_tis=1)
    later = t0 + timedelta(seconds=THRESHOLD + 30)
    for j in (live_sched, live_worker):  # beat recently; the others' last beat is t0
        assert beat(eng, j, later - timedelta(seconds=5))

    r = reset(eng, me, later)
    assert (r.ran, r.jobs_failed, r.tis_adopted, r.tis_failed) == (True, 2, 1, 1)
    states = job_states(eng)
    assert (states[dead_sched], states[dead_worker]) == ("failed", "failed")
    assert states[live_sched] == states[live_worker] == states[me] == "running"  # me: never judges itself
    by_id = {r.id: r for r in tis(eng).values()}
    assert by_id[queued_dead[0].ti_id].state == "queued" and by_id[queued_dead[0].ti_id].queued_by_job_id == me
    assert by_id[queued_live[0].ti_id].queued_by_job_id == live_sched  # a live sibling's: untouched
    assert by_id[run_live.ti_id].state == "running"
    orphan = by_id[run_dead.ti_id]
    assert orphan.state == "up_for_retry" and orphan.state_reason == f"worker job {dead_worker} died"
    (h,) = history(eng)
    assert (h.ti_id, h.try_number, h.state, h.reason) == (run_dead.ti_id, 1, "failed", f"worker job {dead_worker} died")
    assert h.end_date == later
    assert not beat(eng, dead_worker, later)  # the dead worker learns it at its next beat
    assert beat(eng, live_worker, later)


def test_the_last_try_of_an_orphan_fails_for_good_and_a_stale_report_changes_nothing(eng, world):
    t0 = world
    sql(eng, "UPDATE task_instance SET max_tries = 0")
    w, me = register(eng, "worker"), register(eng, "scheduler")
    queue(eng, me, t0)
    ti = claim(eng, w, 1, t0)[0]
    # register_job stamps the database's own clock, which runs on past t0 (seconds on a busy
    # machine; MariaDB's now() also drops t0's fraction): the last beat is set to t0 itself.
    assert beat(eng, w, t0)
    assert reset(eng, me, t0 + timedelta(seconds=THRESHOLD + 1)).tis_failed == 1
    assert {r.id: r for r in tis(eng).values()}[ti.ti_id].state == "failed"
    with db.connect(eng) as conn:  # the worker comes back and reports late: stale, ignored
        assert db.run(conn, "finish_ti", ti_id=ti.ti_id, try_number=ti.try_number, exit_code=0,
                      timed_out=False, reason=None, now=None).scalar() is None
    assert len(history(eng)) == 1


def test_tries_without_a_worker_job_fail_on_a_stale_task_heartbeat(eng, world):
    t0 = world
    me = register(eng, "scheduler")
    queue(eng, me, t0)
    fresh, stale = claim(eng, None, 1, t0 + timedelta(seconds=50)), claim(eng, None, 1, t0)
    r = reset(eng, me, t0 + timedelta(seconds=THRESHOLD + 5))
    assert r.tis_failed == 1
    by_id = {r.id: r for r in tis(eng).values()}
    assert by_id[fresh[0].ti_id].state == "running"
    assert (by_id[stale[0].ti_id].state, by_id[stale[0].ti_id].state_reason) == ("up_for_retry", "task heartbeat stale")


def test_a_job_that_ended_with_a_try_running_leaves_an_orphan(eng, world):
    t0 = world
    w, me = register(eng, "worker"), register(eng, "scheduler")
    queue(eng, me, t0)
    ti = claim(eng, w, 1, t0)[0]
    with db.connect(eng) as conn:
        db.run(conn, "finish_job", job_id=w)  # shut down while the database could not take the report
    r = reset(eng, me, t0 + timedelta(seconds=1))  # no threshold to wait for: the job is over
    assert (r.jobs_failed, r.tis_failed) == (0, 1)
    assert "ended (success) without reporting" in {r.id: r for r in tis(eng).values()}[ti.ti_id].state_reason


def test_tries_being_stopped_whose_worker_died_end_as_a_live_worker_would_end_them(eng, world):
    """reset_orphans_v3: a cleared (`restarting`) or preempted (`preempting`) try waits for its
    worker to say the process tree is gone; a dead worker never will (its tree went with it)."""
    t0 = world
    dead, live, me = register(eng, "worker"), register(eng, "worker"), register(eng, "scheduler")
    assert beat(eng, dead, t0)
    queue(eng, me, t0)
    cleared, preempted = claim(eng, dead, 2, t0)
    cleared_live, preempted_live = claim(eng, live, 2, t0)
    for ti, state in ((cleared, "restarting"), (cleared_live, "restarting"),
                      (preempted, "preempting"), (preempted_live, "preempting")):
        sql(eng, "UPDATE task_instance SET state = :s WHERE id = :i", s=state, i=ti.ti_id)
    before = {r.id: r for r in tis(eng).values()}
    later = t0 + timedelta(seconds=THRESHOLD + 30)
    assert beat(eng, live, later - timedelta(seconds=5))
    r = reset(eng, me, later)
    assert (r.jobs_failed, r.tis_failed) == (1, 0)  # no try failed: they were being stopped anyway
    by_id = {r.id: r for r in tis(eng).values()}
    assert (by_id[cleared.ti_id].state, by_id[cleared.ti_id].worker_job_id) == ("none", None)
    back = by_id[preempted.ti_id]
    assert (back.state, back.worker_job_id, back.max_tries) == ("scheduled", None, before[preempted.ti_id].max_tries + 1)
    assert by_id[cleared_live.ti_id].state == "restarting"  # a live worker's: it reports them itself
    assert by_id[preempted_live.ti_id].state == "preempting"
    assert [(h.ti_id, h.state) for h in history(eng)] == [(preempted.ti_id, "preempted")]
    moves = sql(eng, "SELECT ti_id, action, from_state, to_state, reason FROM state_change ORDER BY ti_id")
    why = f"its worker job {dead} is gone (failed)"
    assert [tuple(m) for m in moves] == sorted([
        (cleared.ti_id, "restarted", "restarting", "none", f"the cleared try has stopped: {why}"),
        (preempted.ti_id, "preempted", "preempting", "scheduled", f"the preempted try has stopped: {why}")])


def test_runs_at_most_once_per_interval(eng, world):
    t0 = world
    me = register(eng, "scheduler")
    assert reset(eng, me, t0).ran
    assert not reset(eng, me, t0 + timedelta(seconds=INTERVAL - 1)).ran
    assert reset(eng, me, t0 + timedelta(seconds=INTERVAL + 1)).ran
    assert sql(eng, "SELECT last_run_at FROM scheduler_lock WHERE name = 'reset_orphans'")[0][0] == \
        t0 + timedelta(seconds=INTERVAL + 1)


def test_held_lock_makes_the_step_busy_not_blocked(eng, cfg, world):
    me = register(eng, "scheduler")
    with eng.connect() as holder:
        holder.execute(sa.text("SELECT 1 FROM scheduler_lock WHERE name = 'reset_orphans' FOR UPDATE"))
        with pytest.raises(sa.exc.DBAPIError) as info:
            reset(eng, me, None)
        assert db.is_lock_busy(info.value)
        summary = tick(eng, cfg)
        holder.rollback()
    assert summary["busy"] == ["reset_orphans"] and summary["orphan_check"] is False
    assert "busy=reset_orphans" in format_summary(summary)
    assert sql(eng, "SELECT busy FROM tick_log ORDER BY id DESC LIMIT 1")[0].busy == "reset_orphans"


def test_tick_summary_reports_orphan_counts(eng, cfg, world):
    t0 = world
    w = register(eng, "worker")
    queue(eng, None, t0, max_tis=1)
    claim(eng, w, 1, t0)
    beat_at = sql(eng, "SELECT latest_heartbeat FROM job WHERE id = :w", w=w)[0][0]
    sql(eng, "UPDATE job SET latest_heartbeat = :t WHERE id = :w", t=beat_at - timedelta(hours=1), w=w)
    s = tick(eng, cfg)
    assert (s["orphan_check"], s["jobs_failed"], s["tis_orphan_failed"]) == (True, 1, 1)
    assert "orphans: jobs dead=1" in format_summary(s)


def test_a_scheduler_declared_dead_registers_again(eng, cfg, world):
    s = Scheduler(eng, cfg)
    try:
        s.run_once()
        old = s.job.id
        sql(eng, "UPDATE job SET state = 'failed' WHERE id = :j", j=old)
        s.job.heartbeat_interval = 0  # beat on the next pass
        s.run_once()
        assert s.job.id != old and job_states(eng)[s.job.id] == "running"
    finally:
        s.stop()
    assert job_states(eng)[s.job.id] == "success"


def test_stuck_queue_entries_give_their_slot_back_then_fail(eng, world):
    t0 = world
    sql(eng, "INSERT INTO pool (name, slots) VALUES ('one', 1)")
    sql(eng, "UPDATE task_instance SET pool = 'one'")
    (first,) = queue(eng, None, t0)  # the pool has room for one
    assert queue(eng, None, t0) == []
    assert requeue(eng, t0 + timedelta(seconds=599)) == (0, 0)  # not stuck yet
    for n in (1, 2):  # max_requeues=2: requeued twice ...
        now = t0 + timedelta(seconds=700 * n)
        assert tuple(requeue(eng, now)) == (1, 0)
        ti = {r.id: r for r in tis(eng).values()}[first.ti_id]
        assert (ti.state, ti.requeue_count, ti.queued_by_job_id) == ("scheduled", n, None)
        assert f"requeued ({n} of 2)" in ti.state_reason
        assert [q.ti_id for q in queue(eng, None, now)] == [first.ti_id]  # the slot was free again
    assert tuple(requeue(eng, t0 + timedelta(seconds=2200))) == (0, 1)  # ... then failed
    ti = {r.id: r for r in tis(eng).values()}[first.ti_id]
    assert (ti.state, ti.try_number) == ("failed", 1)
    assert ti.state_reason == ("not claimed by a worker within 600 s, 3 times; "
                               "is a worker of queue default running?")
    (h,) = history(eng)
    assert (h.ti_id, h.try_number, h.state, h.start_date) == (first.ti_id, 1, "failed", None)
    assert [q.ti_id for q in queue(eng, None, t0 + timedelta(seconds=2200))] != []  # slot released


def test_claimed_tis_are_not_stuck(eng, world):
    t0 = world
    queue(eng, None, t0)
    claim(eng, None, 2, t0)
    assert tuple(requeue(eng, t0 + timedelta(days=1), timeout=1)) == (2, 0)  # the two still queued
    assert sorted(r.state for r in tis(eng).values()) == ["running", "running", "scheduled", "scheduled"]


def test_release_hands_a_try_back_without_using_a_retry(eng, world):
    t0 = world
    queue(eng, None, t0)
    ti = claim(eng, None, 1, t0)[0]
    later = t0 + timedelta(seconds=5)
    assert release(eng, ti.ti_id, ti.try_number + 1, later) is None  # wrong try: stale
    assert release(eng, ti.ti_id, ti.try_number, later) == "scheduled"
    assert release(eng, ti.ti_id, ti.try_number, later) is None  # once only
    row = {r.id: r for r in tis(eng).values()}[ti.ti_id]
    assert (row.state, row.try_number, row.max_tries, row.state_reason) == ("scheduled", 1, 2, "worker shut down")
    (h,) = history(eng)
    assert (h.try_number, h.state, h.reason, h.start_date, h.end_date) == (1, "failed", "worker shut down", t0, later)
    # It runs again as try 2, and still has its one retry: a failure of try 2 is retried.
    assert [q.ti_id for q in queue(eng, None, later)] == [ti.ti_id]
    (again,) = [c for c in claim(eng, None, 10, later) if c.ti_id == ti.ti_id]
    with db.connect(eng) as conn:
        assert db.run(conn, "finish_ti", ti_id=again.ti_id, try_number=2, exit_code=1, timed_out=False,
                      reason=None, now=later).scalar() == "up_for_retry"


def test_downgrade_to_0001_removes_the_new_procedures(eng):
    names = ["reset_orphans_v1", "requeue_stuck_v1", "release_ti_v1"]

    def installed() -> list[str]:
        with eng.begin() as conn:
            dialect = procedures.dialect_of(conn)
            return [n for n in names if procedures.db_checksum(conn, dialect, n, "function") is not None]

    assert installed() == names
    migrate.downgrade(eng, "0001")
    assert installed() == []
    migrate.upgrade(eng)
    assert installed() == names
    with eng.begin() as conn:
        assert all(f.status == "ok" for f in procedures.check(conn) if f.name in names)


def test_heartbeats_are_frequent_enough_for_the_threshold(cfg):
    from types import SimpleNamespace

    from engine.jobs import beat_interval

    assert beat_interval(cfg) == 5.0  # defaults: 5 s beats, 60 s threshold
    assert beat_interval(SimpleNamespace(heartbeat_interval=5.0, job_heartbeat_threshold=8.0)) == 2.0
