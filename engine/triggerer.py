"""The triggerer service (`engine triggerer`): runs the triggers of deferred TIs as asyncio tasks,
thousands at once in one process (time triggers as entries of one heap that one clock task
fires, see _clock), and reports each event or error through fire_triggers (fire_triggers_v2).
The database decides what a fired trigger means (queued with its slot, scheduled with a
priority boost, or a failed try); this module only runs triggers (docs/deferral.md).

One pass, `run_once()`: report what fired (fire_triggers, in batches), heartbeat, then
claim_triggers_v1 (which also fails timed-out triggers and takes over the triggers of dead
triggerers), start what was claimed and cancel what this job no longer owns (fired elsewhere,
e.g. by `engine events send`, or taken over while this process stalled). `loop()` repeats it
every triggerer_poll_interval and reports a fired trigger at once; on PostgreSQL a deferral
wakes it (LISTEN engine_triggerer, engine/wakeup.py) and an idle pass is due only every
listen_poll_interval. Database calls run in a
thread, so triggers keep running meanwhile, and ride out outages like the worker's.

One trigger's code or values never stop the others: a trigger that cannot be loaded, whose
run() raises (anything, SystemExit included), or whose event is not plain JSON (NaN, NUL...)
fires with an error (its try fails with the reason); a fire the database refuses is reported
again as an error fire, and given up (logged) if that is refused too.
"""
from __future__ import annotations

import asyncio
import heapq
import json
import logging
import signal
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from engine import db, wakeup
from engine.db import DB_DOWN
from engine.jobs import Job, beat_interval
from engine.paths import dag_file
from engine.taskvalues import check_event, error_text, one_line, result_text
from engine.triggers import DateTimeTrigger, TriggerEvent, db_now, first_event, load_trigger, set_clock_offset

log = logging.getLogger("engine.triggerer")
REPORT_BATCH = 1000  # fired triggers per fire_triggers call (one transaction)
REPORT_LANES = 2     # fire_triggers calls at once while more than one batch waits
GATHER_DELAY = 0.02  # after a trigger fires, wait this long for others to fire with it,
GATHER_MAX = 0.1     # and again while more keep firing, up to this long


@dataclass
class Fired:
    trigger_id: int
    event: object
    error: str | None
    refusals: int = 0  # how often the database refused to record this fire
    final: str | None = None  # 'success' / 'failed': the event ends the try (TriggerEvent(final=True))
    event_json: str | None = None  # the event as JSON, when known in advance (time triggers)


def _answer(result) -> str:
    """What one fire_triggers call's outcome says: "reported" (its states), "refused" (the
    database raised an error for this batch), "busy" (deadlock, lock wait: try again), "down"."""
    if isinstance(result, BaseException) and not isinstance(result, Exception):
        raise result  # (KeyboardInterrupt, SystemExit in a lane's thread: not the database's answer)
    if not isinstance(result, Exception):
        return "reported"
    return "down" if db.is_unreachable(result) else "busy" if db.is_transient(result) else "refused"


def _moment(trigger) -> datetime | None:
    """When a time trigger fires (its fire_at()), or None for a trigger that needs a task: any
    other, or a time trigger subclass with its own run()."""
    if not (isinstance(trigger, DateTimeTrigger) and type(trigger).run is DateTimeTrigger.run):
        return None
    moment = trigger.fire_at()  # a subclass may compute it: checked here, not in the clock
    if not isinstance(moment, datetime):
        raise TypeError(f"{type(trigger).__name__}.fire_at() returned {type(moment).__name__}, not a datetime")
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)  # naive means UTC


class Triggerer:
    def __init__(self, eng, cfg, capacity: int | None = None):
        self.eng, self.cfg = eng, cfg
        self.capacity = capacity or cfg.triggerer_capacity
        self.job = Job(eng, "triggerer", beat_interval(cfg))
        self.tasks: dict[int, asyncio.Task] = {}
        # Time triggers (DateTimeTrigger, TimeDeltaTrigger and subclasses that keep their run()):
        # no task each, but one heap of (moment, trigger id) and one clock task (_clock) that
        # fires every due one at once: 10,000 due at one instant cost one wake-up, not 10,000.
        self.timers: dict[int, tuple[datetime, str]] = {}  # trigger id -> (moment, its event as JSON)
        self._heap: list[tuple[datetime, int]] = []
        self._clock_task: asyncio.Task | None = None
        self._clock_changed: asyncio.Event | None = None
        self.fired: list[Fired] = []          # ended, not yet reported (oldest first)
        self.outage = db.Outage(log, "triggers keep running, retrying")
        self.stopping = False
        self._wake: asyncio.Event | None = None

    # ---- database calls (run in a thread) ------------------------------------------------------
    async def _db(self, doing: str, fn, default=None):
        if not self.outage.due():
            return default
        try:
            result = await asyncio.to_thread(fn)
        except DB_DOWN as exc:
            self.outage.failed(doing, exc)
            return default
        self.outage.ok()
        return result

    def _fire(self, batch: list[Fired], now=None) -> list:
        """Report a batch in one fire_triggers call (sorted by trigger id: the procedure locks
        in that order); the TIs' new states, in batch order."""
        ordered = sorted({f.trigger_id: f for f in batch}.values(), key=lambda f: f.trigger_id)
        with db.connect(self.eng) as conn:
            rows = db.run(conn, "fire_triggers", trigger_ids=[f.trigger_id for f in ordered],
                          events=[None if f.error is not None else f.event_json or json.dumps(f.event)
                                  for f in ordered],
                          errors=[f.error for f in ordered], finals=[f.final for f in ordered], now=now,
                          boost=self.cfg.resume_priority_boost,
                          max_bytes=getattr(self.cfg, "max_result_bytes", 65536)).all()
        states = {r.trigger_id: r.state for r in rows}
        return [states.get(f.trigger_id) for f in batch]

    def _claim(self, limit: int, now=None):
        with db.connect(self.eng) as conn:
            rows = [dict(r._mapping) for r in db.run(conn, "claim_triggers", job_id=self.job.id, limit=max(limit, 0),
                                                     threshold=self.cfg.job_heartbeat_threshold, now=now)]
            owned = set(db.run(conn, "owned_triggers", job_id=self.job.id).scalars())
            before = datetime.now(timezone.utc)
            db_now = db.run(conn, "db_now").scalar_one()
            after = datetime.now(timezone.utc)
        set_clock_offset((db_now - (before + (after - before) / 2)).total_seconds())
        return rows, owned

    async def report(self, now=None) -> int:
        """Report every ended trigger, oldest first; keep them while the database is down. Up to
        REPORT_LANES batches go at once, each its own connection and transaction (their triggers
        are distinct, and each call locks its rows in id order). When the database refuses a
        batch, its fires are reported one by one from then on, and a refused one is reported
        again as an error fire (_refused)."""
        done, size, lanes = 0, REPORT_BATCH, REPORT_LANES
        while self.fired and self.outage.due():
            if size == 1:
                lanes = 1  # one by one: the refused fire is the head of `fired`
            batches = [b for b in (self.fired[i * size:(i + 1) * size] for i in range(lanes)) if b]
            results = await asyncio.gather(*(asyncio.to_thread(self._fire, b, now) for b in batches),
                                           return_exceptions=True)
            kinds = [_answer(r) for r in results]
            gone = set()
            for b, states, k in zip(batches, results, kinds):
                if k == "reported":
                    gone.update(id(f) for f in b)
                    done += len(b)
                    for f, state in zip(b, states):
                        log.info("trigger %s %s -> %s", f.trigger_id, "failed: " + f.error if f.error else
                                 f"fired ({f.final})" if f.final else "fired", state or "nothing to resume")
            if gone:
                self.fired[:] = [f for f in self.fired if id(f) not in gone]
            if "down" in kinds or all(k == "busy" for k in kinds):
                self.outage.failed("reporting fired triggers",
                                   next(r for r, k in zip(results, kinds) if k in ("down", "busy")))
                break
            self.outage.ok()
            if "busy" in kinds:
                lanes = 1  # a deadlock or lock wait beside a lane that went through: on one lane from here
            for b, r, k in zip(batches, results, kinds):
                if k == "refused":
                    if len(b) > 1:
                        size = 1  # find the refused fire: one transaction per fire from here on
                    else:
                        self._refused(r)
        return done

    def _refused(self, exc: BaseException) -> None:
        """The database refused the fire at the head of `fired`: report it as an error fire with
        the refusal as reason; if that is refused too, give it up (logged), never retry forever."""
        f = self.fired[0]
        message = one_line(db.error_message(exc) if hasattr(exc, "orig") else error_text(exc))
        if f.refusals:
            log.error("trigger %s: the database refused its error fire too (%s); giving it up", f.trigger_id, message)
            self.fired.pop(0)
            return
        log.error("trigger %s: the database refused the fire (%s); failing its try", f.trigger_id, message)
        self.fired[0] = Fired(f.trigger_id, None, one_line(f"the database refused the trigger's fire: {message}"),
                              refusals=1)

    # ---- triggers --------------------------------------------------------------------------------
    def _start(self, row: dict) -> None:
        tid = row["trigger_id"]
        try:
            folder = str(dag_file(row["fileloc"], self.cfg.dags_path).parent) if row.get("fileloc") else None
            trigger = load_trigger(row["classpath"], row["kwargs"], folder)
            trigger.created_at = row["created_at"]
            moment = _moment(trigger)
        except BaseException as exc:  # noqa: BLE001 - any error of user code (SystemExit too) is the trigger's
            self.fired.append(Fired(tid, None, one_line(f"trigger could not be loaded: {error_text(exc)}")))
            return
        if moment is None:
            self.tasks[tid] = asyncio.create_task(self._run(tid, trigger), name=f"trigger-{tid}")
            return
        # the event, serialized now: a burst of time triggers is reported without that work
        self.timers[tid] = (moment, json.dumps({"moment": moment.isoformat()}))
        heapq.heappush(self._heap, (moment, tid))
        if self._clock_task is None:
            self._clock_changed = asyncio.Event()
            self._clock_task = asyncio.create_task(self._clock(), name="trigger-clock")
        elif self._heap[0] == (moment, tid):  # earlier than the clock waits for
            self._clock_changed.set()

    async def _clock(self) -> None:
        """Fire the due time triggers, all at once, by the database clock (triggers.db_now), as
        their run() would: the event is {"moment": ISO 8601}. Sleeps until the earliest moment,
        at most 60 s at a time (the clock offset is measured again every pass), or until an
        earlier one is added."""
        try:
            while self.timers:
                now = db_now()
                due = 0
                while self._heap and self._heap[0][0] <= now:
                    moment, tid = heapq.heappop(self._heap)
                    timer = self.timers.get(tid)
                    if timer is not None and timer[0] == moment:
                        del self.timers[tid]
                        self.fired.append(Fired(tid, None, None, event_json=timer[1]))
                        due += 1
                if due and self._wake is not None:
                    self._wake.set()
                if not self.timers:
                    break
                while self._heap[0][1] not in self.timers:  # cancelled: dropped from the heap
                    heapq.heappop(self._heap)
                self._clock_changed.clear()
                left = (self._heap[0][0] - db_now()).total_seconds()
                if left > 0:
                    try:
                        await asyncio.wait_for(self._clock_changed.wait(), min(left, 60.0))
                    except asyncio.TimeoutError:
                        pass
        finally:
            if not self.timers:
                self._heap.clear()
            self._clock_task = None

    async def _run(self, tid: int, trigger) -> None:
        try:
            event = await first_event(trigger)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - user code: SystemExit must not end the triggerer
            log.warning("trigger %s (%s) raised %s", tid, type(trigger).__name__, error_text(exc))
            self.fired.append(Fired(tid, None, one_line(f"trigger failed: {error_text(exc)}")))
        else:
            final = event.state if isinstance(event, TriggerEvent) else None
            payload = event.payload if isinstance(event, TriggerEvent) else event
            try:
                check_event(payload)  # travels as JSON: plain JSON only
            except Exception as exc:  # noqa: BLE001
                log.warning("trigger %s (%s): %s", tid, type(trigger).__name__, error_text(exc))
                self.fired.append(Fired(tid, None, one_line(f"trigger failed: its event is not plain JSON: "
                                                            f"{error_text(exc)}")))
                return
            if final == "success" and payload is not None:
                try:  # the payload becomes the task's result: the same rules as a return value
                    result_text(payload, getattr(self.cfg, "max_result_bytes", 65536), "the trigger's final event")
                except Exception as exc:  # noqa: BLE001
                    self.fired.append(Fired(tid, None, one_line(f"trigger failed: {error_text(exc)}")))
                    return
            self.fired.append(Fired(tid, payload, None, final=final))
        finally:
            self.tasks.pop(tid, None)
            if self._wake is not None:
                self._wake.set()

    async def _cancel(self, ids) -> None:
        ids = list(ids)
        for i in ids:
            self.timers.pop(i, None)  # its heap entry is skipped when it comes due
        tasks = [self.tasks.pop(i) for i in ids if i in self.tasks]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- the service -----------------------------------------------------------------------------
    async def run_once(self, now=None) -> dict:
        counts = {"claimed": 0, "fired": 0, "cancelled": 0, "running": self.held()}
        if self.job.id is None and await self._db("registering the triggerer", self.job.register) is None:
            return counts
        counts["fired"] = await self.report(now)
        if not await self._db("heartbeating", lambda: self.job.heartbeat(now=now), True):
            # Another triggerer judged us dead and may run our triggers: drop them, start afresh.
            log.error("triggerer job %s was declared dead; dropping %s trigger(s), registering again",
                      self.job.id, self.held())
            counts["cancelled"] += self.held()
            await self._cancel([*self.tasks, *self.timers])
            if await self._db("registering the triggerer", self.job.register) is None:
                return counts
        free = 0 if self.stopping else self.capacity - self.held()
        claimed = await self._db("claiming triggers", lambda: self._claim(free, now))
        if claimed is not None:
            rows, owned = claimed
            gone = [i for i in [*self.tasks, *self.timers] if i not in owned]
            counts["cancelled"] += len(gone)
            await self._cancel(gone)
            for row in rows:
                if row["trigger_id"] not in self.tasks and row["trigger_id"] not in self.timers:
                    self._start(row)
                    counts["claimed"] += 1
        counts["fired"] += await self.report(now)  # triggers that could not even load
        counts["running"] = self.held()
        return counts

    def held(self) -> int:
        """How many triggers this process runs (tasks and timers)."""
        return len(self.tasks) + len(self.timers)

    async def stop(self) -> None:
        """Cancel the triggers, report what already fired, hand the rest back, finish the job."""
        self.stopping = True
        await self._cancel([*self.tasks, *self.timers])
        if self._clock_task is not None:
            self._clock_task.cancel()
            await asyncio.gather(self._clock_task, return_exceptions=True)
            self._clock_task = None
        self.outage.retry_at = 0.0
        await self.report()
        if self.job.id is not None:
            def release():
                with db.connect(self.eng) as conn:
                    db.run(conn, "release_triggers", job_id=self.job.id)
                self.job.finish()
            await self._db("handing triggers back", release)
        log.info("triggerer job %s stopped", self.job.id)

    async def loop(self, max_passes: int | None = None) -> None:
        """Pass until SIGTERM/SIGINT (idle: every listen_poll_interval, sooner when woken or after
        a pass that did something); report fired triggers at once."""
        self._wake = asyncio.Event()
        aio = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                aio.add_signal_handler(sig, self._on_signal)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
                pass
        passes, next_pass, poll = 0, 0.0, wakeup.Backoff()
        # PostgreSQL: defer_ti notifies engine_triggerer, so a new trigger starts at once and an
        # idle pass is due only every listen_poll_interval (engine/wakeup.py); MySQL/MariaDB:
        # polls with a backoff up to listen_poll_interval.
        listener = wakeup.Listener(self.eng, "listen_triggerer")
        notified = []

        def on_notify():
            if listener.drain():
                notified.append(True)
                self._wake.set()
            if listener.fileno() is None:  # lost: polling until it is re-opened by a later pass
                aio.remove_reader(fd)
        fd = listener.fileno() if listener.open() else None
        if fd is not None:
            aio.add_reader(fd, on_notify)
        try:
            while not self.stopping and (max_passes is None or passes < max_passes):
                if notified:
                    notified.clear()
                    next_pass = 0.0
                if time.monotonic() >= next_pass:
                    counts = await self.run_once()
                    passes += 1
                    if fd is not None and listener.fileno() is None:
                        fd = None
                    if fd is None and listener.open():
                        fd = listener.fileno()
                        aio.add_reader(fd, on_notify)
                    if fd is not None:
                        wait = wakeup.idle_wait(listener, self.cfg, self.cfg.triggerer_poll_interval)
                    else:  # polling (MariaDB): soon after a pass that did something, backing off
                        poll.note(bool(counts["claimed"] or counts["fired"] or counts["cancelled"]))
                        wait = poll.next(wakeup.poll_ceiling(self.cfg, self.cfg.triggerer_poll_interval))
                    next_pass = time.monotonic() + min(wait, self.job.heartbeat_interval)
                    if counts["claimed"] or counts["fired"] or counts["cancelled"]:
                        log.info("pass %s", counts)
                elif self.fired:
                    await self._gather()
                    await self.report()
                self._wake.clear()
                if self.stopping or (self.fired and self.outage.due()):
                    continue  # report what fired meanwhile at once
                try:
                    await asyncio.wait_for(self._wake.wait(), max(0.0, next_pass - time.monotonic()))
                except asyncio.TimeoutError:
                    pass
        finally:
            if fd is not None and listener.fileno() is not None:
                aio.remove_reader(fd)
            listener.close()
            await self.stop()

    async def _gather(self) -> None:
        """Wait GATHER_DELAY for others to fire with the first, longer while they keep coming
        (many due at one instant: one call per REPORT_BATCH, not one per handful), at most
        GATHER_MAX in all."""
        end = time.monotonic() + GATHER_MAX
        seen = -1
        while len(self.fired) != seen and len(self.fired) < REPORT_BATCH and time.monotonic() < end:
            seen = len(self.fired)
            await asyncio.sleep(GATHER_DELAY)

    def _on_signal(self) -> None:
        self.stopping = True
        if self._wake is not None:
            self._wake.set()

    def run(self, max_passes: int | None = None) -> None:
        asyncio.run(self.loop(max_passes))
