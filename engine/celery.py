"""The celery executor: Celery app, message transport of `engine dispatcher --executor celery`,
and the task that runs a dispatched try (`engine celery-worker`, or `celery -A engine.celery
worker -Q QUEUES`).

A message is (ti_id, token), sent to the Celery queue celery_queue_prefix + the TI's queue.
The task only calls engine.executors.run_dispatched: start_ti_v1 starts the try for the current
token only, and the try runs and reports exactly as in `engine worker`. acks_late with
prefetch 1: a message is acknowledged when its try has ended (and been reported), so a worker
killed with -9 leaves its message to be redelivered, and the redelivered copy starts nothing
(its try already started: the token is spent; reset_orphans fails or retries that try). Lost
messages are re-sent by the dispatcher after dispatch_resend_timeout with a new token.
Settings: celery_broker_url (amqp://... for RabbitMQ, redis://... for Redis), celery_queue_prefix.
"""
from __future__ import annotations

import logging
import time

from celery import Celery
from celery.signals import worker_process_init

from engine.config import load_config
from engine.taskvalues import one_line

log = logging.getLogger("engine.celery")
TASK = "engine.run_ti"
_service: tuple | None = None        # (engine, cfg) of this process, made on first use


def _eng_cfg():
    """The database engine and settings of this (pool) process, as the CLI makes them."""
    global _service
    if _service is None:
        from engine import calls, db

        cfg = load_config()
        eng = db.make_engine(db.resolve_url(cfg), schema=cfg.schema or None)
        _service = (calls.pin(eng, cfg.procedure_versions), cfg)
    return _service


@worker_process_init.connect
def _forget_parent_engine(**_):
    global _service
    _service = None                  # never share the parent's pooled connections after fork


def run_ti(ti_id, token) -> str:
    """Run the try of a dispatched TI (engine.executors.run_dispatched). A malformed message
    changes nothing: it is logged and dropped."""
    if isinstance(ti_id, bool) or not isinstance(ti_id, int) or not isinstance(token, str) or not token \
            or len(token) > 64 or "\x00" in token:
        log.error("dropping a malformed message (ti_id %r, token %r): not an id and a dispatch token",
                  ti_id, str(token)[:80])
        return "malformed"
    from engine.executors import run_dispatched

    eng, cfg = _eng_cfg()
    return run_dispatched(eng, cfg, ti_id, token)


def make_app(cfg=None) -> Celery:
    cfg = cfg or load_config()
    app = Celery("engine", broker=cfg.celery_broker_url, set_as_current=False)
    options = {"confirm_publish": True} if cfg.celery_broker_url.startswith(("amqp", "pyamqp")) else {}
    app.conf.update(
        task_acks_late=True,                  # acknowledged when the try has ended
        task_reject_on_worker_lost=True,      # a pool process killed with -9: redeliver (it starts nothing)
        worker_prefetch_multiplier=1,         # a worker holds one message per free process
        task_ignore_result=True,              # outcomes go to the database, not to a result backend
        task_serializer="json", accept_content=["json"],
        task_default_queue=f"{cfg.celery_queue_prefix}default",
        broker_connection_retry_on_startup=True,
        broker_transport_options=options,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
    )
    app.task(name=TASK)(run_ti)
    return app


def run_worker(app: Celery, argv: list[str], sleep=time.sleep) -> int:
    """Run a Celery worker until it is asked to stop (SIGTERM, SIGINT, SIGQUIT); return its exit
    code. A worker that had become ready and then stopped on its own is started again, after a
    delay that doubles up to 30 s, as a supervisor would: its tries report through the database,
    and its unacknowledged messages come back. Seen with kombu 5.7's Redis transport: when a
    broker restart drops the connection while a message is unacknowledged, restoring it raises
    AttributeError ('NoneType' object has no attribute 'hostname'), Celery calls that an
    "Unrecoverable error" and returns with exit code 0. A worker that fails before it is ready
    (a bad setting) is not started again."""
    from celery.signals import worker_ready
    from celery.worker import state

    def asked_to_stop() -> bool:   # Celery's signal handlers set these, also between two runs
        return any(flag is not None and flag is not False for flag in (state.should_stop, state.should_terminate))

    def on_ready(**_):
        ready.append(True)

    ready: list[bool] = []
    worker_ready.connect(on_ready, weak=False)
    try:
        delay = 0.5
        while True:
            ready.clear()
            started = time.monotonic()
            code = app.start(argv)
            if asked_to_stop() or not ready:
                return code or 0
            delay = 1.0 if time.monotonic() - started > 60 else min(30.0, delay * 2)
            log.error("the Celery worker stopped on its own (exit code %s; the error is above): starting it "
                      "again in %.0f s", code, delay)
            for _ in range(round(delay * 10)):
                if asked_to_stop():
                    return 0
                sleep(0.1)
            if asked_to_stop():
                return 0
    finally:
        worker_ready.disconnect(on_ready)


def queue_name(cfg, queue: str) -> str:
    return f"{cfg.celery_queue_prefix}{queue}"


class CeleryTransport:
    """How `engine dispatcher --executor celery` sends: one persistent broker connection;
    ready() connects (once), send() publishes each row as a message, stopping at the first
    failure (the rest are re-sent after the timeout)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.app = make_app(cfg)
        self.conn = None

    def ready(self) -> bool:
        try:
            if self.conn is None:
                self.conn = self.app.connection_for_write()
            self.conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=3)
            return True
        except Exception as exc:  # noqa: BLE001 - whatever the transport raises: the broker is down
            log.debug("broker unreachable: %s", exc)
            self.close()
            return False

    def send(self, rows: list[dict]) -> int:
        sent = 0
        try:
            for r in rows:
                self.app.send_task(TASK, args=[r["ti_id"], r["token"]], queue=queue_name(self.cfg, r["queue"]),
                                   connection=self.conn, retry=False)
                sent += 1
        except Exception as exc:  # noqa: BLE001 - the broker went away mid-batch
            log.warning("sending to the broker failed (%s: %s)", type(exc).__name__, one_line(str(exc), 300))
            self.close()
        return sent

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.release()
            except Exception:  # noqa: BLE001 - best effort
                pass
            self.conn = None


app = make_app()                      # `celery -A engine.celery worker -Q ...`
