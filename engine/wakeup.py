"""Wake-ups instead of polling (PostgreSQL LISTEN/NOTIFY), with polling kept as the fallback.

Two channels. The named statements that make work runnable send a NOTIFY in the same
transaction as their procedure call, so it is delivered when (and only if) that transaction
commits:

    engine_scheduler   finish_ti, fire_trigger, trigger_dag   -> a scheduler runs a pass now
                                                                 (the finished TI's downstream,
                                                                 the new run, the resumed TI)
    engine_queued      the scheduler's queue_tis step when it queued something, fire_trigger
                                                              -> workers claim now

A service LISTENs on its channel over one dedicated autocommit connection (`Listener`) and
waits on that socket (and the worker on its children's pidfds, engine.worker) for at most its
poll interval: a notification only cuts the wait short, it never carries data, and a lost one
(a dropped connection, a server restart) costs one poll interval, no more. On MySQL/MariaDB,
which has no LISTEN, `Listener` is inert and the services poll as before.

The LISTEN statements and the NOTIFYs are named statements (sql/postgresql/queries/listen_*.sql,
notify_queued.sql); this module only opens the connection, waits and drains.
"""
from __future__ import annotations

import logging
import select
import time

from engine import db

log = logging.getLogger("engine.wakeup")
RECONNECT_DELAY = 5.0      # seconds between attempts to re-open a lost listening connection


class Listener:
    """LISTEN through the named statement `query` (PostgreSQL only); `wait()` until a
    notification or the timeout. Inert (wait() only sleeps) on other dialects, or while the
    listening connection cannot be opened."""

    def __init__(self, eng, query: str):
        self.eng, self.query = eng, query
        self.enabled = getattr(getattr(eng, "dialect", None), "name", None) == "postgresql"
        self._conn = None          # the SQLAlchemy connection holding the LISTEN
        self._pg = None            # its psycopg connection
        self._retry_at = 0.0
        self._lost = False         # the connection was lost: notifications may have been missed

    @property
    def active(self) -> bool:
        return self._pg is not None

    def open(self) -> bool:
        """Open the listening connection when it is not open; True when it is."""
        if not self.enabled or self._pg is not None:
            return self._pg is not None
        if time.monotonic() < self._retry_at:
            return False
        try:
            conn = self.eng.connect().execution_options(isolation_level="AUTOCOMMIT")
            db.run(conn, self.query)
        except Exception as exc:  # noqa: BLE001 - any failure: poll until the next attempt
            self._retry_at = time.monotonic() + RECONNECT_DELAY
            self._lost = True
            log.debug("cannot LISTEN (%s); polling meanwhile", db.first_line(exc))
            return False
        self._conn, self._pg = conn, conn.connection.driver_connection
        return True

    def fileno(self) -> int | None:
        return self._pg.fileno() if self._pg is not None else None

    def drain(self) -> int:
        """Consume what arrived on the socket; the number of notifications (0 when none)."""
        if self._pg is None:
            return 0
        try:
            pg = self._pg.pgconn
            pg.consume_input()
            n = 0
            while pg.notifies() is not None:
                n += 1
            return n
        except Exception as exc:  # noqa: BLE001 - the connection broke: poll, re-open later
            log.debug("listening connection lost (%s)", db.first_line(exc))
            self.close()
            self._lost = True
            self._retry_at = time.monotonic() + RECONNECT_DELAY
            return 1               # something may have happened meanwhile: look now

    def wait(self, timeout: float, fds=(), stop=None, listen: bool = True) -> bool:
        """Block until a notification (unless not `listen`), one of `fds` is readable, `stop()`
        is true or `timeout` seconds passed (in slices of at most 0.25 s when `stop` is given,
        so a signal handler's flag is seen). True when woken early by a notification or an fd."""
        if self.open() and self._lost and listen:
            self._lost = False
            return True            # back after a loss: look now for what may have been missed
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            watch = list(fds)
            me = self.fileno() if listen else None
            if me is not None:
                watch.append(me)
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop()):
                return False
            slice_ = min(left, 0.25) if stop is not None else left
            if watch:
                try:
                    ready, _, _ = select.select(watch, [], [], slice_)
                except (OSError, ValueError):   # an fd closed under us: let the caller look
                    return True
            else:
                time.sleep(slice_)
                ready = []
            if me is not None and me in ready and self.drain():
                return True
            if any(fd in ready for fd in fds):
                return True

    def close(self) -> None:
        conn, self._conn, self._pg = self._conn, None, None
        if conn is not None:
            try:
                conn.invalidate()  # never back to the pool: it is LISTENing
                conn.close()
            except Exception:  # noqa: BLE001 - best effort
                pass


def poll_ceiling(cfg, interval: float) -> float:
    """The longest wait of a polling service (Backoff's ceiling): listen_poll_interval, never
    less than the service's own `interval`."""
    return max(interval, float(getattr(cfg, "listen_poll_interval", interval)))


def idle_wait(listener: "Listener | None", cfg, interval: float) -> float:
    """How long an idle service waits: its own `interval`, or, while a notification would wake it
    (listener active), listen_poll_interval when that is longer."""
    if listener is not None and listener.active:
        return max(interval, float(getattr(cfg, "listen_poll_interval", interval)))
    return interval


class Backoff:
    """Polling where no notification wakes a service (MariaDB; PostgreSQL while LISTEN is
    lost): look again soon after a pass that did work (a downstream task or the next queued
    TI is likely to follow within milliseconds), then less and less often, doubling up to the
    ceiling the caller gives (`poll_ceiling`: listen_poll_interval, as long as a listening
    service sleeps). A busy service reacts in tens of milliseconds; an idle one looks once per
    ceiling, as on PostgreSQL, so an idle deployment costs a few statements per second."""

    FIRST = 0.05  # seconds: the first wait after a pass that did work

    def __init__(self):
        self.delay: float | None = None  # None: the next wait is FIRST

    def note(self, worked: bool) -> None:
        """After every pass: one that did work starts the waits over from FIRST."""
        if worked:
            self.delay = None

    def next(self, interval: float) -> float:
        """Seconds to wait before the next pass: FIRST, then doubling, at most `interval`."""
        self.delay = self.FIRST if self.delay is None else min(self.delay * 2, interval)
        return min(self.delay, interval)


def notify_queued(conn) -> None:
    """In the caller's transaction: tell listening workers that TIs were queued (PostgreSQL)."""
    if conn.dialect.name == "postgresql":
        db.run(conn, "notify_queued")
