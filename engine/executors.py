"""Executors other than the database queue: the dispatcher's side and the executor worker's side
of the contract in docs/executors.md. Decisions stay in the database:

- dispatch_tis (the `Dispatcher`; the named query calls dispatch_tis_v2): queued TIs of an
  executor without a message in flight get a dispatch token; the dispatcher sends one message
  (ti_id, token) per TI. A message not started within dispatch_resend_timeout is re-sent with a
  new token.
- start_ti_v1 (`run_dispatched`): queued -> running only for the current token, so a late,
  duplicate or redelivered message starts nothing. The try then runs exactly as in `engine
  worker`: the same Worker code starts it under its supervisor, enforces execution_timeout,
  heartbeats with heartbeat_v2 (an operator's cancel/kill/clear stops it), and reports through
  finish_ti / defer_ti / release_ti, fenced by TI id + try number + owner job.

The transport is pluggable: `Dispatcher.send(rows)` is given the rows of one pass (engine.celery
sends them as Celery messages).
"""
from __future__ import annotations

import logging
import signal
import threading
import time

from engine import db, wakeup
from engine.db import DB_DOWN
from engine.jobs import Job, beat_interval
from engine.worker import Worker

log = logging.getLogger("engine.executors")


class DispatchedTry(Worker):
    """One try of a dispatched TI, run by the worker's own machinery (concurrency 1): its claim
    is start_ti_v1 with the message's token, once. Its job row lives exactly as long as the try,
    so a killed process is noticed by reset_orphans like a killed `engine worker`."""

    def __init__(self, eng, cfg, ti_id: int, token: str):
        super().__init__(eng, cfg, queues=["-"], concurrency=1)
        self.job.queues = []            # claims from no queue of the database queue (status --check)
        self.ti_id, self.token = ti_id, token
        self.asked = False              # start_ti_v1 was called (and answered)
        self.started = False            # ... and started the try
        self.listener = wakeup.Listener(eng, "listen_worker")
        self.listener.enabled = False   # waits on the try's pidfd only, never LISTENs

    def _claim(self, limit: int, now=None) -> list[dict]:
        if self.asked:
            return []
        with db.connect(self.eng) as conn:
            rows = self._claimed(db.run(
                conn, "start_ti", ti_id=self.ti_id, token=self.token, job_id=self.job.id,
                hostname=self.job.hostname, log_dir=str(self.cfg.log_path), now=None))
        self.asked, self.started = True, bool(rows)
        return rows

    def run(self) -> str:
        """Start and run the try; 'ran' when it ran and its outcome was reported, 'stale' when the
        message may not start anything (start_ti_v1 returned no row), 'unreachable' when the
        database could not be asked (the message is re-sent after the timeout)."""
        try:
            while True:
                self.run_once()
                if not self.asked:
                    if self.outage.down:
                        return "unreachable"
                    continue
                if not self.children and not self.unreported:
                    return "ran" if self.started else "stale"
                self._wait()
        except BaseException:
            if self.children:           # do not leave the try running unowned
                self._kill_all("executor worker crashed", grace=0)
                self._report_pending()
            raise
        finally:
            if self.job.id is not None:
                self._db("finishing the job", self.job.finish)


_zygote = None   # this process's warm zygote (engine.zygote), kept from one try to the next


def run_dispatched(eng, cfg, ti_id: int, token: str) -> str:
    """What an executor worker does with one message (ti_id, token): see DispatchedTry.run.
    With worker_zygote (the default) the try is forked from a zygote this process keeps for
    its next tries, as `engine worker` does."""
    global _zygote
    one = DispatchedTry(eng, cfg, ti_id, token)
    one._use_zygote = bool(getattr(cfg, "worker_zygote", True))
    one.zygote = _zygote
    try:
        result = one.run()
    finally:
        _zygote = one.zygote
    log.info("ti %s (token %s): %s", ti_id, token, result)
    return result


class Dispatcher:
    """`engine dispatcher`: hands queued TIs of `executor` to a transport. One pass: if the
    transport answers, dispatch_tis marks up to `limit` TIs as sent and `send(rows)` sends
    them. A send that fails (broker down, this process killed after the commit) needs nothing
    done: those TIs stay queued and are re-sent after dispatch_resend_timeout."""

    def __init__(self, eng, cfg, executor: str, transport, limit: int = 512):
        self.eng, self.cfg, self.executor, self.transport, self.limit = eng, cfg, executor, transport, limit
        self.outage = db.Outage(log, "queued TIs wait, retrying")
        # The service's job row (registered by loop()): kind 'dispatcher', job.queues = the
        # executor it serves, so `engine status --check` says when no dispatcher is live.
        self.job = Job(eng, "dispatcher", beat_interval(cfg), queues=[executor])
        self.broker_down = False
        self.stopping = False

    def run_once(self, now=None) -> dict:
        if not self.transport.ready():
            if not self.broker_down:
                log.warning("broker of executor %s unreachable; queued TIs wait for it", self.executor)
            self.broker_down = True
            return {"sent": 0, "failed": 0, "broker": False}
        if self.broker_down:
            log.warning("broker of executor %s reachable again", self.executor)
            self.broker_down = False
        if not self.outage.due():
            return {"sent": 0, "failed": 0, "broker": True}
        try:
            with db.connect(self.eng) as conn:
                rows = [dict(r._mapping) for r in db.run(
                    conn, "dispatch_tis", executor=self.executor, limit=self.limit,
                    resend_after=float(self.cfg.dispatch_resend_timeout), now=now)]
        except DB_DOWN as exc:
            self.outage.failed("dispatching", exc)
            return {"sent": 0, "failed": 0, "broker": True}
        self.outage.ok()
        sent = self.transport.send(rows) if rows else 0
        if sent < len(rows):
            log.warning("%s of %s message(s) of executor %s not sent; they are re-sent after %g s",
                        len(rows) - sent, len(rows), self.executor, self.cfg.dispatch_resend_timeout)
        for r in rows:
            if r["attempt"] > 1:
                log.warning("ti %s: message re-sent (attempt %s): the last one was not started within %g s",
                            r["ti_id"], r["attempt"], self.cfg.dispatch_resend_timeout)
        return {"sent": sent, "failed": len(rows) - sent, "broker": True}

    def _beat(self) -> None:
        try:
            if not self.job.heartbeat():  # judged dead (a long stall): a live dispatcher again
                log.warning("dispatcher job %s was judged dead; registering again", self.job.id)
                self.job.register()
        except DB_DOWN:
            pass  # run_once reports the outage

    def loop(self, max_passes: int | None = None) -> None:
        """Pass after pass until SIGTERM/SIGINT: at once again after a full pass, else after
        dispatch_interval (PostgreSQL: or as soon as something is queued); while the broker or
        the database is down, again after a short pause."""
        def _stop(signum, frame):
            self.stopping = True
        main = threading.current_thread() is threading.main_thread()
        saved = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
        listener = wakeup.Listener(self.eng, "listen_worker")
        listener.open()
        passes = 0
        self.job.register()
        log.info("dispatcher of executor %s started (job %s)", self.executor, self.job.id)
        try:
            while not self.stopping and (max_passes is None or passes < max_passes):
                self._beat()
                counts = self.run_once()
                passes += 1
                if counts["sent"] + counts["failed"] >= self.limit:
                    continue
                interval = float(self.cfg.dispatch_interval)
                if counts["broker"] and not counts["failed"] and not self.outage.down:
                    interval = wakeup.idle_wait(listener, self.cfg, interval)  # a notification wakes it
                    listener.wait(interval, stop=lambda: self.stopping)
                else:
                    time.sleep(min(max(interval, 0.5), 2.0))
        finally:
            listener.close()
            self.transport.close()
            try:
                self.job.finish()
            except DB_DOWN:
                pass  # its heartbeat stops: it is judged dead after job_heartbeat_threshold
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            log.info("dispatcher of executor %s stopped", self.executor)
