"""The scheduler service: `run_once()` is one pass (what `engine tick` runs), `loop()` repeats it.

Every decision is a stored function; this module only calls them in order, each in its own
short transaction, and reports what they did:

    heartbeat -> reset_orphans -> requeue_stuck -> create_dag_runs -> schedule_tis -> queue_tis
    -> record the tick

A step whose lock another scheduler holds is skipped and reported as busy: the pass goes on.
reset_orphans runs every pass but does its work at most once per orphan_check_interval across
all schedulers (the procedure decides). `loop()` rides out database outages.
"""
from __future__ import annotations

import logging
import signal
import time
from datetime import datetime

import sqlalchemy as sa

from engine import db
from engine.jobs import Job, beat_interval

log = logging.getLogger("engine.scheduler")


class Scheduler:
    def __init__(self, eng, cfg):
        self.eng = eng
        self.cfg = cfg
        self.job = Job(eng, "scheduler", beat_interval(cfg))
        self.outage = db.Outage(log)
        self._stop = False

    def start(self) -> None:
        if self.job.id is None:
            self.job.register()

    def _step(self, name: str, busy: list[str], fn):
        """Run fn(conn) in its own transaction; None (and `name` in busy) when its lock is held."""
        try:
            with db.connect(self.eng) as conn:
                return fn(conn)
        except sa.exc.DBAPIError as exc:
            if not db.is_lock_busy(exc):
                raise
            busy.append(name)
            return None

    def run_once(self, now: datetime | None = None) -> dict:
        """One scheduling pass. ``now`` replaces the database clock (tests inject time)."""
        self.start()
        started = time.monotonic()
        busy: list[str] = []
        cfg = self.cfg
        if not self.job.heartbeat(now=now):
            # Another scheduler judged us dead (we stalled past the threshold) and adopted our
            # queued TIs; nothing is held in memory, so carry on as a new job.
            old = self.job.id
            self.job.register()
            log.warning("scheduler job %s was declared dead; continuing as job %s", old, self.job.id)
        orphans = self._step("reset_orphans", busy, lambda conn: db.run(
            conn, "reset_orphans", threshold=cfg.job_heartbeat_threshold, interval=cfg.orphan_check_interval,
            job_id=self.job.id, now=now).one())
        stuck = self._step("requeue_stuck", busy, lambda conn: db.run(
            conn, "requeue_stuck", timeout=cfg.queued_timeout, max_requeues=cfg.max_requeues, now=now).one())
        with db.connect(self.eng) as conn:
            created = db.run(conn, "create_dag_runs", now=now).one()
        with db.connect(self.eng) as conn:
            sched = db.run(conn, "schedule_tis", now=now, batch=cfg.schedule_batch).one()
        queued = self._step("queue_tis", busy, lambda conn: db.run(
            conn, "queue_tis", max_tis=cfg.max_tis, job_id=self.job.id, now=now).all()) or []
        summary = {
            "job_id": self.job.id,
            "orphan_check": bool(orphans and orphans.ran),
            "jobs_failed": orphans.jobs_failed if orphans else 0,
            "tis_adopted": orphans.tis_adopted if orphans else 0,
            "tis_orphan_failed": orphans.tis_failed if orphans else 0,
            "tis_requeued": stuck.tis_requeued if stuck else 0,
            "tis_stuck_failed": stuck.tis_failed if stuck else 0,
            "runs_created": created.runs_created,
            "runs_started": created.runs_started,
            "runs_examined": sched.runs_examined,
            "tis_scheduled": sched.tis_scheduled,
            "tis_skipped": sched.tis_skipped,
            "tis_upstream_failed": sched.tis_upstream_failed,
            "runs_finished": sched.runs_finished,
            "tis_queued": len(queued),
            "busy": busy,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
        }
        with db.connect(self.eng) as conn:
            db.run(conn, "record_tick", job_id=self.job.id, hostname=self.job.hostname,
                   duration_ms=summary["duration_ms"], runs_created=created.runs_created,
                   runs_started=created.runs_started, tis_scheduled=sched.tis_scheduled,
                   tis_queued=len(queued), runs_finished=sched.runs_finished, busy=",".join(busy) or None)
        return summary

    def stop(self) -> None:
        """Mark the job finished (a clean exit, not a death). Best effort when the database is down."""
        try:
            self.job.finish()
        except db.DB_DOWN as exc:
            log.warning("could not mark scheduler job %s finished (%s); it will be judged dead after "
                        "job_heartbeat_threshold", self.job.id, db.first_line(exc))

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stop and time.monotonic() < deadline:
            time.sleep(0.05)

    def loop(self, max_ticks: int | None = None) -> None:
        """Tick every scheduler_interval until SIGTERM/SIGINT; the pass in progress finishes.
        While the database is unreachable, retry with a capped exponential backoff."""
        def _request_stop(signum, frame):
            self._stop = True
        signal.signal(signal.SIGTERM, _request_stop)
        signal.signal(signal.SIGINT, _request_stop)
        ticks = 0
        try:
            while not self._stop and (max_ticks is None or ticks < max_ticks):
                try:
                    summary = self.run_once()
                except db.DB_DOWN as exc:
                    self._sleep(self.outage.failed("ticking", exc))
                    continue
                self.outage.ok()
                ticks += 1
                log.info("tick %s", summary)
                if summary["tis_queued"] == 0 and summary["tis_scheduled"] == 0:
                    # Idle: wait, but never so long that the heartbeat falls behind.
                    self._sleep(min(self.cfg.scheduler_interval, self.job.heartbeat_interval))
        finally:
            self.stop()


def format_summary(s: dict) -> str:
    busy = f" busy={','.join(s['busy'])}" if s["busy"] else ""
    orphans = ""
    if s["jobs_failed"] or s["tis_adopted"] or s["tis_orphan_failed"] or s["tis_requeued"] or s["tis_stuck_failed"]:
        orphans = (f"; orphans: jobs dead={s['jobs_failed']} tis adopted={s['tis_adopted']} "
                   f"failed={s['tis_orphan_failed']}; stuck: requeued={s['tis_requeued']} failed={s['tis_stuck_failed']}")
    return (f"tick: runs created={s['runs_created']} started={s['runs_started']} finished={s['runs_finished']}; "
            f"tis scheduled={s['tis_scheduled']} skipped={s['tis_skipped']} "
            f"upstream_failed={s['tis_upstream_failed']} queued={s['tis_queued']}{orphans}{busy}; "
            f"{s['duration_ms']} ms")
