"""The scheduler service: `run_once()` is one pass (what `engine tick` runs), `loop()` repeats it.

Every decision is a stored function; this module only calls them in order, each in its own
short transaction, and reports what they did:

    heartbeat -> reset_orphans -> requeue_stuck -> create_dag_runs -> analyze_stale (statistics,
    when a table changed a lot) -> schedule_tis -> queue_tis (-> fold_usage, when queue_tis is
    pinned to a version that does not fold the usage counters) -> preempt -> clean (retention,
    when due) -> record the tick (only a pass that did something)

A step whose lock another scheduler holds is skipped and reported as busy: the pass goes on.
A step the database refuses as a whole (the procedures isolate one DAG's or one TI's failure
and record it against that DAG, so this should not happen) is reported in the summary's
`errors`, in tick_log.errors and the log, and the pass goes on with the next step: one
failure never stops every other step. reset_orphans runs every pass but does its work at
most once per orphan_check_interval across all schedulers (the procedure decides). `loop()`
rides out database outages.

Wake-ups (engine.wakeup): on PostgreSQL `loop()` LISTENs on engine_scheduler and an idle
scheduler's wait ends the moment a TI finishes, a trigger fires or a run is triggered, so the
finished TI's downstream is scheduled and queued at once instead of on the next pass; the
queue_tis step notifies the workers (engine_queued) in its own transaction when it queued
something. Waiting still ends after scheduler_interval (time-based work: cron runs, retries,
timeouts; and every notification that was lost), and on MySQL/MariaDB that poll is all there is.
"""
from __future__ import annotations

import logging
import signal
import time
from datetime import datetime

from engine import calls, db, wakeup
from engine.jobs import Job, beat_interval

log = logging.getLogger("engine.scheduler")
ANALYZE_MIN_ROWS = 1000    # analyze_stale_v1: a table that changed by fewer rows is never re-analyzed
FOLDING_QUEUE_TIS = 6     # the first queue_tis version that folds the usage counters
ANALYZE_IDLE_EVERY = 60.0  # s: after an idle pass, analyze_stale runs again only this long after its last call


class Scheduler:
    def __init__(self, eng, cfg):
        self.eng = eng
        self.cfg = cfg
        self.job = Job(eng, "scheduler", beat_interval(cfg))
        self.outage = db.Outage(log)
        self._stop = False
        self.listener: wakeup.Listener | None = None     # set by loop() (PostgreSQL wake-ups)
        self.passes = 0        # passes run by this process
        self.idle_passes = 0   # of which idle: nothing done, nothing busy, no error (no tick_log row)
        self._analyzed_at = float("-inf")  # monotonic time of the last analyze_stale call
        self._worked = True    # the previous pass did work (or there was none)
        self._conn = None      # the connection the steps of the pass in progress share
        # queue_tis_v6 and later fold the usage counters in each call; an older version pinned
        # by procedure_versions does not, so the pass folds them in a step of its own.
        self._fold_apart = calls.calling(eng).get("queue_tis", FOLDING_QUEUE_TIS) < FOLDING_QUEUE_TIS

    def start(self) -> None:
        if self.job.id is None:
            self.job.register()

    def _step(self, name: str, busy: list[str], errors: list[dict], fn):
        """Run fn(conn) in its own transaction. None, and `name` in busy, when its lock is held
        (or it met a deadlock: the next pass tries again); None, and an entry in errors, when the
        database refused it. An unreachable database propagates (the loop backs off). The steps
        of a pass share one connection (one checkout, one pool pre-ping per pass), each step in
        its own transaction; after any error the next step checks out a fresh one."""
        try:
            if self._conn is None:
                try:
                    self._conn = self.eng.connect()  # closed at the end of the pass (_release)
                except db.operational_errors() as exc:
                    raise db.describe_connect_error(self.eng.url.render_as_string(hide_password=False), exc) from None
            with self._conn.begin():
                return fn(self._conn)
        except db.dbapi_errors() as exc:
            self._release()
            if db.is_lock_busy(exc) or db.is_transient(exc):
                busy.append(name)
                return None
            if db.is_unreachable(exc):
                raise
            message = db.error_message(exc)[:500]
            log.error("step %s failed: %s; the pass goes on with the other steps", name, message)
            errors.append({"step": name, "error": message})
            return None
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a broken connection may refuse to close
                pass

    def run_once(self, now: datetime | None = None, woken: bool = False) -> dict:
        """One scheduling pass. ``now`` replaces the database clock (tests inject time).
        ``woken``: a pass that loop() runs within an idle interval of a full pass (a
        notification or a busy queue asked for it): reset_orphans and requeue_stuck, whose
        work only comes due with time, are left to the next full pass."""
        self.start()
        started = time.monotonic()
        busy: list[str] = []
        errors: list[dict] = []
        cfg = self.cfg
        if not self.job.heartbeat(now=now):
            # Another scheduler judged us dead (we stalled past the threshold) and adopted our
            # queued TIs; nothing is held in memory, so carry on as a new job.
            old = self.job.id
            self.job.register()
            log.warning("scheduler job %s was declared dead; continuing as job %s", old, self.job.id)

        def step(name, fn):
            return self._step(name, busy, errors, fn)
        orphans = stuck = None
        if not woken:
            orphans = step("reset_orphans", lambda conn: db.run(
                conn, "reset_orphans", threshold=cfg.job_heartbeat_threshold, interval=cfg.orphan_check_interval,
                job_id=self.job.id, now=now).one())
            stuck = step("requeue_stuck", lambda conn: db.run(
                conn, "requeue_stuck", timeout=cfg.queued_timeout, max_requeues=cfg.max_requeues, now=now).one())
        created = step("create_dag_runs", lambda conn: db.run(conn, "create_dag_runs", now=now).one())
        # Statistics of the busy tables before the steps planned on them (analyze_stale_v1: one
        # catalog read unless a table changed by analyze_fraction since its last ANALYZE); not in
        # every idle pass: after a pass that did work, when this one created or started runs, or
        # ANALYZE_IDLE_EVERY after the last call (what workers and triggerers changed meanwhile).
        analyzed = None
        new_runs = created is not None and (created.runs_created or created.runs_started)
        if cfg.analyze_fraction > 0 and (self._worked or new_runs
                                         or time.monotonic() - self._analyzed_at >= ANALYZE_IDLE_EVERY):
            self._analyzed_at = time.monotonic()
            analyzed = step("analyze_stale", lambda conn: db.run(
                conn, "analyze_stale", fraction=cfg.analyze_fraction, min_rows=ANALYZE_MIN_ROWS).all())
        sched = step("schedule_tis", lambda conn: db.run(conn, "schedule_tis", now=now, batch=cfg.schedule_batch).one())
        def queue(conn):
            knobs = queue_knobs(cfg)
            # Every knob off (the default): only the call, one round trip (the procedure reads
            # an unset knob as off).
            rows = db.run(conn, "queue_tis", max_tis=cfg.max_tis, job_id=self.job.id, now=now,
                          last_only=knobs_off(knobs), **knobs).all()
            if rows:
                wakeup.notify_queued(conn)  # delivered to the workers when this commits
            return rows
        queued = step("queue_tis", queue) or []
        if self._fold_apart:  # queue_tis pinned to v1..v5, which do not fold the usage counters
            step("fold_usage", lambda conn: db.run(conn, "fold_usage").one())
        # Preemption (pools with a preempt_margin): after queue_tis, so a TI that fits is queued,
        # never the cause of a preemption.
        preempted = step("preempt", lambda conn: db.run(
            conn, "preempt", now=now, cooldown=cfg.preempt_cooldown, max_per_pass=cfg.preempt_max_per_pass,
            min_runtime=cfg.preempt_min_runtime).all()) or []
        # Retention (clean_v1 decides when it is due across schedulers; one batch per table per
        # pass while a backlog remains), not in a pass a wake-up asked for. By the database
        # clock: an injected `now` never ages rows.
        cleaned = step("clean", lambda conn: db.run(
            conn, "clean", table_name=None, older_than=cfg.retention_days * 86400, batch=cfg.clean_batch,
            dry_run=False, interval=cfg.clean_interval, now=None).all()) if cfg.clean_interval > 0 and not woken else None

        def count(row, field):
            return getattr(row, field) if row is not None else 0
        summary = {
            "job_id": self.job.id,
            "orphan_check": bool(orphans and orphans.ran),
            "jobs_failed": count(orphans, "jobs_failed"),
            "tis_adopted": count(orphans, "tis_adopted"),
            "tis_orphan_failed": count(orphans, "tis_failed"),
            "tis_requeued": count(stuck, "tis_requeued"),
            "tis_stuck_failed": count(stuck, "tis_failed"),
            "runs_created": count(created, "runs_created"),
            "runs_started": count(created, "runs_started"),
            "runs_examined": count(sched, "runs_examined"),
            "tis_scheduled": count(sched, "tis_scheduled"),
            "tis_skipped": count(sched, "tis_skipped"),
            "tis_upstream_failed": count(sched, "tis_upstream_failed"),
            "tis_removed": count(sched, "tis_removed"),
            "runs_errored": count(sched, "runs_errored"),
            "runs_finished": count(sched, "runs_finished"),
            "tis_queued": len(queued),
            "tis_preempted": len(preempted),
            "rows_cleaned": sum(int(r.deleted) for r in cleaned or () if r.ran),
            "tables_analyzed": [r.table_name for r in analyzed or ()],
            "busy": busy,
            "errors": errors,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
        }
        self._release()
        self.passes += 1
        self._worked = did_work(summary)
        if not self._worked:
            # An idle pass leaves no row (tick_log would gain one per second per scheduler):
            # it is counted in memory (metrics) and the heartbeat shows the scheduler is alive.
            self.idle_passes += 1
            return summary
        with db.connect(self.eng) as conn:
            db.run(conn, "record_tick", job_id=self.job.id, hostname=self.job.hostname,
                   duration_ms=summary["duration_ms"], runs_created=summary["runs_created"],
                   runs_started=summary["runs_started"], tis_scheduled=summary["tis_scheduled"],
                   tis_queued=len(queued), tis_preempted=len(preempted), runs_finished=summary["runs_finished"], busy=",".join(busy) or None,
                   errors="; ".join(f"{e['step']}: {e['error']}" for e in errors)[:2000] or None)
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

    def _wait(self, seconds: float) -> bool:
        """Idle: wait up to `seconds`, less when a notification (engine_scheduler) arrives
        (then True)."""
        if self.listener is None:
            self._sleep(seconds)
            return False
        return self.listener.wait(seconds, stop=lambda: self._stop)

    def loop(self, max_ticks: int | None = None) -> None:
        """Tick every scheduler_interval until SIGTERM/SIGINT; the pass in progress finishes.
        While the database is unreachable, retry with a capped exponential backoff."""
        def _request_stop(signum, frame):
            self._stop = True
        signal.signal(signal.SIGTERM, _request_stop)
        signal.signal(signal.SIGINT, _request_stop)
        ticks, last_full, poll = 0, 0.0, wakeup.Backoff()
        self.listener = wakeup.Listener(self.eng, "listen_scheduler")
        self.listener.open()  # before the first pass: nothing committed after it is missed
        try:
            while not self._stop and (max_ticks is None or ticks < max_ticks):
                # reset_orphans and requeue_stuck once per idle interval, not in every pass a
                # notification or a busy queue asks for
                quick = time.monotonic() - last_full < wakeup.idle_wait(self.listener, self.cfg,
                                                                        self.cfg.scheduler_interval)
                try:
                    summary = self.run_once(woken=quick)
                    if not quick:
                        last_full = time.monotonic()
                except db.DB_DOWN as exc:
                    self._sleep(self.outage.failed("ticking", exc))
                    continue
                self.outage.ok()
                ticks += 1
                from engine import metrics  # not at the top: `engine tick` does without prometheus_client
                metrics.record_pass(summary, idle=not did_work(summary))
                if did_work(summary):
                    log.info("%s", format_summary(summary), extra={"summary": summary})
                else:
                    log.debug("idle pass (%s ms)", summary["duration_ms"])
                poll.note(did_work(summary))
                if summary["tis_queued"] == 0 and summary["tis_scheduled"] == 0:
                    # Idle: wait, but never so long that the heartbeat falls behind; without
                    # notifications (MariaDB), soon again after a pass that did work (a finished
                    # TI's downstream is likely next), backing off to listen_poll_interval.
                    if self.listener.active:
                        wait = wakeup.idle_wait(self.listener, self.cfg, self.cfg.scheduler_interval)
                    else:
                        wait = poll.next(wakeup.poll_ceiling(self.cfg, self.cfg.scheduler_interval))
                    wait = min(wait, self.job.heartbeat_interval)
                    self._wait(wait)
        finally:
            self.listener.close()
            self.listener = None
            self.stop()


WORK_FIELDS = ("jobs_failed", "tis_adopted", "tis_orphan_failed", "tis_requeued", "tis_stuck_failed", "runs_created",
               "runs_started", "tis_scheduled", "tis_skipped", "tis_upstream_failed", "tis_removed", "runs_errored",
               "runs_finished", "tis_queued", "tis_preempted", "rows_cleaned", "tables_analyzed")


def queue_knobs(cfg=None) -> dict:
    """The priority settings queue_tis takes (docs/priority.md); all off without a config."""
    if cfg is None:
        return {"aging_rate": 0.0, "aging_cap": 1, "reserve_after": 0.0}
    return {"aging_rate": cfg.priority_aging, "aging_cap": cfg.priority_aging_cap, "reserve_after": cfg.reserve_after}


def knobs_off(knobs: dict) -> bool:
    """True when queue_tis's knobs are all off: no aging (rate 0) and no wide reservations
    (reserve_after 0), which is what queue_tis_v4 reads when the settings are unset."""
    return not knobs["aging_rate"] and not knobs["reserve_after"]


def did_work(s: dict) -> bool:
    """True when a pass changed something, or a step was busy or failed: such a pass is recorded
    in tick_log and logged at INFO; an idle pass is neither."""
    return bool(s["busy"] or s["errors"] or any(s.get(f) for f in WORK_FIELDS))


def format_summary(s: dict) -> str:
    busy = f" busy={','.join(s['busy'])}" if s["busy"] else ""
    orphans = ""
    if s["jobs_failed"] or s["tis_adopted"] or s["tis_orphan_failed"] or s["tis_requeued"] or s["tis_stuck_failed"]:
        orphans = (f"; orphans: jobs dead={s['jobs_failed']} tis adopted={s['tis_adopted']} "
                   f"failed={s['tis_orphan_failed']}; stuck: requeued={s['tis_requeued']} failed={s['tis_stuck_failed']}")
    failed = f" failed={','.join(e['step'] for e in s['errors'])}" if s.get("errors") else ""
    errored = f"; runs with errors={s['runs_errored']} (see dag_errors)" if s.get("runs_errored") else ""
    cleaned = f"; cleaned {s['rows_cleaned']} old row(s)" if s.get("rows_cleaned") else ""
    cleaned += f"; analyzed {','.join(s['tables_analyzed'])}" if s.get("tables_analyzed") else ""
    cleaned += f"; preempted {s['tis_preempted']} TI(s)" if s.get("tis_preempted") else ""
    return (f"tick: runs created={s['runs_created']} started={s['runs_started']} finished={s['runs_finished']}; "
            f"tis scheduled={s['tis_scheduled']} skipped={s['tis_skipped']} "
            f"upstream_failed={s['tis_upstream_failed']} removed={s.get('tis_removed', 0)} queued={s['tis_queued']}"
            f"{orphans}{busy}{failed}{errored}{cleaned}; "
            f"{s['duration_ms']} ms")
