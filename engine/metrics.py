"""Prometheus metrics: `engine metrics` prints them once; `--metrics-port` (setting metrics_port)
serves them from `engine scheduler`, `engine worker` and `engine triggerer`.

Three kinds, all named engine_<name> (Airflow's metric name with dots as underscores where
Airflow has one: docs/operations.md, "Metrics"):
- counts the database knows: the view `metrics` (sql/<dialect>/metrics.sql), read at each
  scrape by :class:`DatabaseCollector` (served by the scheduler and printed by `engine metrics`);
- what one job knows of itself in the database: `live_jobs` (:class:`JobCollector`, every service);
- what only the process knows: the scheduler's pass durations (histogram), passes, idle passes,
  busy critical sections, rows cleaned (:func:`record_pass`), plus prometheus_client's process_*.
"""
from __future__ import annotations

import errno
import logging
import socket

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector

from engine import db
from engine.errors import EngineError

log = logging.getLogger("engine.metrics")

PREFIX = "engine_"
LABELS = ("pool", "queue", "state", "reason", "kind")

# metric (view `metrics`) -> (help, Airflow's name or None)
DATABASE_METRICS = {
    "pool_open_slots": ("open slots of a pool (unlimited pools left out)", "pool.open_slots.<pool>"),
    "pool_queued_slots": ("slots held by queued TIs", "pool.queued_slots.<pool>"),
    "pool_running_slots": ("slots held by running TIs", "pool.running_slots.<pool>"),
    "pool_deferred_slots": ("slots of deferred TIs (held only with include_deferred)", "pool.deferred_slots.<pool>"),
    "pool_scheduled_slots": ("slots scheduled TIs will need", "pool.scheduled_slots.<pool>"),
    "pool_starving_tasks": ("scheduled TIs waiting because their pool is full, closed (0 slots) or too small", "pool.starving_tasks.<pool>"),
    "scheduler_tasks_starving": ("scheduled TIs waiting for a pool slot, all pools", "scheduler.tasks.starving"),
    "task_instances": ("TIs by pool, queue and state (scheduled, queued, running, deferred, up_for_retry)", None),
    "pending_tis": ("scheduled TIs by why they wait (view pending_reasons)", None),
    "oldest_ti_age_seconds": ("age of the oldest scheduled / queued TI", None),
    "triggers_running": ("triggers a triggerer is running", "triggers.running"),
    "triggers_unclaimed": ("triggers of deferred TIs no triggerer runs yet", None),
    "ti_finish_last_hour": ("tries that ended in the last hour, by outcome", "ti.finish (as a rate)"),
    "ti_start_last_hour": ("tries that started in the last hour", "ti.start (as a rate)"),
    "jobs_running": ("scheduler / worker / triggerer jobs in state running", None),
    "dag_errors": ("DAGs with a recorded error (view dag_errors)", "dag_processing.import_errors (nearest)"),
    "deployment_draining": ("1 while the deployment drains", None),
}

# What only the scheduler process knows (registered on no registry: serve() adds them to its own).
LOOP_DURATION = Histogram(f"{PREFIX}scheduler_scheduler_loop_duration_seconds",
                          "duration of one scheduling pass (Airflow scheduler.scheduler_loop_duration)",
                          buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=None)
PASSES = Counter(f"{PREFIX}scheduler_passes", "scheduling passes run by this process", registry=None)
IDLE_PASSES = Counter(f"{PREFIX}scheduler_idle_passes", "passes that did nothing (no tick_log row)", registry=None)
CRITICAL_SECTION_BUSY = Counter(f"{PREFIX}scheduler_critical_section_busy",
                                "passes whose queue_tis found its lock held by another scheduler "
                                "(Airflow scheduler.critical_section_busy); busy ratio = rate(this) / rate(passes)",
                                registry=None)
TIS_QUEUED = Counter(f"{PREFIX}scheduler_tis_queued", "TIs queued by this scheduler", registry=None)
ORPHANS_ADOPTED = Counter(f"{PREFIX}scheduler_orphaned_tasks_adopted",
                          "queued TIs of dead schedulers adopted (Airflow scheduler.orphaned_tasks.adopted)",
                          registry=None)
ORPHANS_CLEARED = Counter(f"{PREFIX}scheduler_orphaned_tasks_cleared",
                          "running tries of dead workers failed (Airflow scheduler.orphaned_tasks.cleared)",
                          registry=None)
ROWS_CLEANED = Counter(f"{PREFIX}db_clean_rows", "old rows deleted by this scheduler's retention cleanup",
                       registry=None)
TIS_PREEMPTED = Counter(f"{PREFIX}scheduler_tis_preempted", "running TIs preempted for higher-priority work "
                        "(preempt_v1, docs/priority.md)", registry=None)
SCHEDULER_METRICS = (LOOP_DURATION, PASSES, IDLE_PASSES, CRITICAL_SECTION_BUSY, TIS_QUEUED, ORPHANS_ADOPTED,
                     ORPHANS_CLEARED, ROWS_CLEANED, TIS_PREEMPTED)


def record_pass(summary: dict, idle: bool) -> None:
    """Count one scheduler pass (engine/scheduler.py calls this after each pass)."""
    PASSES.inc()
    if idle:
        IDLE_PASSES.inc()
    LOOP_DURATION.observe(summary["duration_ms"] / 1000)
    if "queue_tis" in summary["busy"]:
        CRITICAL_SECTION_BUSY.inc()
    TIS_QUEUED.inc(summary["tis_queued"])
    ORPHANS_ADOPTED.inc(summary["tis_adopted"])
    ORPHANS_CLEARED.inc(summary["tis_orphan_failed"])
    ROWS_CLEANED.inc(summary.get("rows_cleaned", 0))
    TIS_PREEMPTED.inc(summary.get("tis_preempted", 0))


def database_samples(eng) -> list:
    """Rows of the view `metrics`: (metric, pool, queue, state, reason, kind, value)."""
    with db.connect(eng) as conn:
        return db.run(conn, "metrics").all()


class DatabaseCollector:
    """The view `metrics`, read at each scrape; engine_database_up 0 when it cannot be read."""

    def __init__(self, eng):
        self.eng = eng

    def collect(self):
        up = GaugeMetricFamily(f"{PREFIX}database_up", "1 when the metrics view could be read")
        try:
            rows = database_samples(self.eng)
        except db.DB_DOWN as exc:
            log.warning("metrics: database unreachable (%s)", db.first_line(exc))
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        families: dict[str, GaugeMetricFamily] = {}
        for r in rows:
            labels = [k for k in LABELS if getattr(r, k) is not None]
            fam = families.get(r.metric)
            if fam is None:
                help_text, airflow = DATABASE_METRICS.get(r.metric, (r.metric, None))
                if airflow:
                    help_text += f" (Airflow {airflow})"
                fam = families[r.metric] = GaugeMetricFamily(PREFIX + r.metric, help_text, labels=labels)
            fam.add_metric([str(getattr(r, k)) for k in labels], float(r.value or 0))
        yield from families.values()


class JobCollector:
    """This process's job as the database sees it (view live_jobs): heartbeat age, running TIs."""

    def __init__(self, eng, job):
        self.eng, self.job = eng, job

    def collect(self):
        labels = ["kind", "job_id", "hostname"]
        age = GaugeMetricFamily(f"{PREFIX}job_heartbeat_age_seconds", "age of this job's last heartbeat "
                                "(Airflow <job>_heartbeat as an age)", labels=labels)
        running = GaugeMetricFamily(f"{PREFIX}job_running_tis", "TIs running on this job (workers)", labels=labels)
        if self.job.id is not None:
            try:
                with db.connect(self.eng) as conn:
                    row = db.run(conn, "metrics_job", job_id=self.job.id).first()
            except db.DB_DOWN:
                row = None
            except sa.exc.DBAPIError as exc:  # e.g. a worker role, which may not read live_jobs
                log.debug("metrics: no job gauges (%s)", db.first_line(exc))
                row = None
            if row is not None:
                values = [self.job.kind, str(self.job.id), self.job.hostname]
                age.add_metric(values, float(row.heartbeat_age_s or 0))
                running.add_metric(values, float(row.running_tis or 0))
        yield age
        yield running


def registry_for(eng, job=None, database: bool = True, scheduler: bool = False) -> CollectorRegistry:
    registry = CollectorRegistry()
    if database:
        registry.register(DatabaseCollector(eng))
    if job is not None:
        registry.register(JobCollector(eng, job))
    if scheduler:
        for m in SCHEDULER_METRICS:
            registry.register(m)
    return registry


def text_once(eng) -> str:
    """The database metrics in Prometheus' text format (`engine metrics`)."""
    return generate_latest(registry_for(eng)).decode()


def serve(cfg, eng, job, kind: str, port: int | None = None):
    """Serve /metrics on metrics_host:port (metrics_port) in a daemon thread; None when off.
    The scheduler serves the database counts too; every service serves its own job's."""
    port = cfg.metrics_port if port is None else port
    if not port:
        return None
    registry = registry_for(eng, job, database=(kind == "scheduler"), scheduler=(kind == "scheduler"))
    registry.register(ProcessCollector(registry=None))
    try:
        server, _thread = start_http_server(port, addr=cfg.metrics_host, registry=registry)
    except OSError as exc:  # the port is taken, or metrics_host is no address of this host
        bad_host = isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL
        fix = ("set metrics_host (ENGINE_METRICS_HOST) to an address of this host, e.g. 0.0.0.0" if bad_host
               else "pick another --metrics-port / metrics_port")
        raise EngineError(f"cannot serve metrics on {cfg.metrics_host}:{port} ({exc.strerror or exc}); {fix}") from None
    log.info("%s metrics on http://%s:%s/metrics", kind, cfg.metrics_host, server.server_port)
    return server
