"""The scheduler service: `run_once()` is one pass (what `engine tick` runs), `loop()` repeats it.

Every decision is a stored function; this module only calls them in order, each in its own
short transaction, and reports what they did:

    heartbeat -> create_dag_runs -> schedule_tis -> queue_tis -> record the tick

A step whose lock another scheduler holds is skipped and reported as busy: the pass goes on.
"""
from __future__ import annotations

import logging
import signal
import time
from datetime import datetime, timezone

import sqlalchemy as sa

from engine import db
from engine.jobs import Job

log = logging.getLogger("engine.scheduler")


class Scheduler:
    def __init__(self, eng, cfg):
        self.eng = eng
        self.cfg = cfg
        self.job = Job(eng, "scheduler", cfg.heartbeat_interval)
        self._stop = False

    def start(self) -> None:
        if self.job.id is None:
            self.job.register()

    def run_once(self, now: datetime | None = None) -> dict:
        """One scheduling pass. ``now`` replaces the database clock (tests inject time)."""
        self.start()
        started = time.monotonic()
        started_at = datetime.now(timezone.utc)
        busy: list[str] = []
        self.job.heartbeat(now=now)
        with db.connect(self.eng) as conn:
            created = db.run(conn, "create_dag_runs", now=now).one()
        with db.connect(self.eng) as conn:
            sched = db.run(conn, "schedule_tis", now=now, batch=self.cfg.schedule_batch).one()
        queued: list = []
        try:
            with db.connect(self.eng) as conn:
                queued = db.run(conn, "queue_tis", max_tis=self.cfg.max_tis, job_id=self.job.id, now=now).all()
        except sa.exc.DBAPIError as exc:
            if not db.is_lock_busy(exc):
                raise
            busy.append("queue_tis")
        summary = {
            "job_id": self.job.id,
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
            db.run(conn, "record_tick", job_id=self.job.id, hostname=self.job.hostname, started_at=started_at,
                   duration_ms=summary["duration_ms"], runs_created=created.runs_created,
                   runs_started=created.runs_started, tis_scheduled=sched.tis_scheduled,
                   tis_queued=len(queued), runs_finished=sched.runs_finished, busy=",".join(busy) or None)
        return summary

    def stop(self) -> None:
        self.job.finish()

    def loop(self, max_ticks: int | None = None) -> None:
        """Tick every scheduler_interval until SIGTERM/SIGINT; the pass in progress finishes."""
        def _request_stop(signum, frame):
            self._stop = True
        signal.signal(signal.SIGTERM, _request_stop)
        signal.signal(signal.SIGINT, _request_stop)
        ticks = 0
        try:
            while not self._stop and (max_ticks is None or ticks < max_ticks):
                summary = self.run_once()
                ticks += 1
                log.info("tick %s", summary)
                if summary["tis_queued"] == 0 and summary["tis_scheduled"] == 0:
                    deadline = time.monotonic() + self.cfg.scheduler_interval
                    while not self._stop and time.monotonic() < deadline:
                        time.sleep(0.05)
        finally:
            self.stop()


def format_summary(s: dict) -> str:
    busy = f" busy={','.join(s['busy'])}" if s["busy"] else ""
    return (f"tick: runs created={s['runs_created']} started={s['runs_started']} finished={s['runs_finished']}; "
            f"tis scheduled={s['tis_scheduled']} skipped={s['tis_skipped']} "
            f"upstream_failed={s['tis_upstream_failed']} queued={s['tis_queued']}{busy}; {s['duration_ms']} ms")
