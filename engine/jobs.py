"""The job registry: every scheduler, worker and triggerer process is a `job` row that
heartbeats. Liveness is judged by the database clock (heartbeat_v1, live_jobs)."""
from __future__ import annotations

import os
import socket
import time

from engine import db


def beat_interval(cfg) -> float:
    """Seconds between heartbeats: heartbeat_interval, but never more than a quarter of
    job_heartbeat_threshold, so a live job is never judged dead for beating too rarely."""
    return min(cfg.heartbeat_interval, cfg.job_heartbeat_threshold / 4)


class Job:
    def __init__(self, eng, kind: str, heartbeat_interval: float = 5.0, queues: list[str] | None = None):
        self.eng = eng
        # job.queues (engine status --check): a worker's queues; a dispatcher's executor
        self.queues = queues
        self.kind = kind
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.heartbeat_interval = heartbeat_interval
        self.id: int | None = None
        self._last_beat = 0.0

    def register(self) -> int:
        with db.connect(self.eng) as conn:
            self.id = db.run(conn, "register_job", kind=self.kind, hostname=self.hostname, pid=self.pid).scalar_one()
            if self.queues is not None:  # [] (a Celery try's job): it claims from no queue
                db.run(conn, "set_job_queues", job_id=self.id, queues=",".join(self.queues))
        self._last_beat = time.monotonic()
        return self.id

    def heartbeat(self, force: bool = False, now=None) -> bool:
        """Beat when the interval has passed (or when forced). False: we were declared dead."""
        if not force and time.monotonic() - self._last_beat < self.heartbeat_interval:
            return True
        with db.connect(self.eng) as conn:
            alive = db.run(conn, "heartbeat", job_id=self.id, now=now).scalar_one()
        self._last_beat = time.monotonic()
        return bool(alive)

    def finish(self) -> None:
        if self.id is None:
            return
        with db.connect(self.eng) as conn:
            db.run(conn, "finish_job", job_id=self.id)
