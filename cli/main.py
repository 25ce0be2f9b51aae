"""`engine`: the command line. Every command is a thin wrapper: decisions live in the database."""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import click
import sqlalchemy as sa

from engine import db, logs, migrate, procedures, validate
from engine.config import load_config
from engine.errors import EngineError


class Context:
    def __init__(self, database_url: str | None, config_path: str | None):
        self.overrides = {"database_url": database_url}
        self.config_path = config_path
        self._cfg = None
        self._eng = None

    def cfg(self, **more):
        if more:
            self.overrides.update({k: v for k, v in more.items() if v is not None})
            self._cfg = None
        if self._cfg is None:
            self._cfg = load_config(self.overrides, self.config_path)
            logs.apply_config(self._cfg)
        return self._cfg

    def engine(self, migrated: bool = True):
        """The database engine; with `migrated`, the schema must be at head. The embedded
        database is migrated on first use so a newcomer needs no set-up."""
        if self._eng is None:
            cfg = self.cfg()
            self._eng = db.make_engine(db.resolve_url(cfg))
            if migrated:
                try:
                    current = migrate.current(self._eng)
                except sa.exc.OperationalError as exc:
                    raise db.describe_connect_error(self._eng.url.render_as_string(hide_password=False), exc) from None
                migrate.check_known(current)
                if current != migrate.head():
                    if not cfg.database_url:
                        migrate.upgrade(self._eng)
                    else:
                        raise EngineError(f"database schema is at {current or 'nothing'}, not {migrate.head()}; "
                                          f"run `engine db upgrade`")
        return self._eng

    def close(self) -> None:
        if self._eng is not None:
            self._eng.dispose()
            self._eng = None


def _one_line(exc: BaseException) -> str:
    # PostgreSQL: the primary message; MySQL/MariaDB (PyMySQL): the message of (code, message).
    return db.error_message(exc)


def handle_errors(fn):
    """Bad input and unreachable databases end in one line on stderr and exit code 1."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EngineError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except sa.exc.DBAPIError as exc:
            if isinstance(exc, sa.exc.OperationalError) and not db.is_user_error(exc):
                # PyMySQL reports a stored routine's SIGNAL SQLSTATE '45000' (error 1644) as an
                # OperationalError too: that is bad input, shown like any other DBAPIError.
                click.echo(f"error: database error: {_one_line(exc)}; check that the database is up "
                           f"and ENGINE_DATABASE_URL is right", err=True)
            else:
                click.echo(f"error: {_one_line(exc)}", err=True)
            sys.exit(1)
    return wrapper


pass_ctx = click.make_pass_decorator(Context)


class Seconds(click.ParamType):
    """Seconds: a finite number in (0, hi] (click.FloatRange lets NaN through)."""
    name = "seconds"

    def __init__(self, hi: float):
        self.hi = hi

    def convert(self, value, param, ctx):
        try:
            return validate.check_seconds(float(value), "seconds", allow_zero=False, hi=self.hi)
        except (TypeError, ValueError, EngineError):
            self.fail(f"{value!r} is not a number of seconds more than 0 and at most {self.hi:g}", param, ctx)


def checked(what: str, run_id: bool = False):
    """A click callback: the argument must be a valid id (validate.check_id)."""
    def callback(ctx, param, value):
        if value is None:
            return None
        try:
            return validate.check_id(value, what, run_id=run_id)
        except EngineError as exc:
            raise click.BadParameter(str(exc)) from None
    return callback


def table(rows, headers) -> str:
    rows = [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    out = [line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]
    return "\n".join(out)


def show(result, empty: str = "(none)") -> None:
    rows = result.all()
    click.echo(table(rows, list(result.keys())) if rows else empty)


class OneLineGroup(click.Group):
    """Usage errors (a bad option value, a missing argument) as one line on stderr, exit 1,
    like every other error of the command line (one line naming the thing and the fix)."""

    def main(self, args=None, prog_name=None, **extra):
        extra.pop("standalone_mode", None)
        try:
            return super().main(args, prog_name, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            names, ctx = [], getattr(exc, "ctx", None)
            while ctx is not None and ctx.parent is not None:
                names.append(ctx.info_name)
                ctx = ctx.parent
            command = " ".join(["engine", *reversed(names)])
            hint = f"; see `{command} --help`" if isinstance(exc, click.UsageError) else ""
            click.echo(f"error: {' '.join(exc.format_message().split()).rstrip('.')}{hint}", err=True)
            sys.exit(1)


@click.group(cls=OneLineGroup)
@click.option("--database-url", envvar=None, help="SQLAlchemy URL (default: ENGINE_DATABASE_URL, engine.toml, embedded)")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="engine.toml to read")
@click.option("-v", "--verbose", is_flag=True, help="log what the services do")
@click.option("--log-format", type=click.Choice(["text", "json"]), help="log lines as text or JSON (default: log_format)")
@click.pass_context
def main(ctx, database_url, config_path, verbose, log_format):
    """A workflow scheduler whose decisions are made by the database."""
    logs.setup(verbose, log_format)
    ctx.obj = Context(database_url, config_path)
    ctx.call_on_close(ctx.obj.close)


# ---- config ---------------------------------------------------------------------------------
@main.group()
def config():
    """Settings."""


@config.command("show")
@pass_ctx
@handle_errors
def config_show(c: Context):
    """Print every setting, its effective value and where it came from."""
    cfg = c.cfg()
    rows = [(name, v.value if name != "database_url" or not v.value else
             sa.engine.make_url(str(v.value)).render_as_string(hide_password=True), v.source) for name, v in cfg.items()]
    click.echo(table(rows, ["setting", "value", "source"]))


# ---- db -------------------------------------------------------------------------------------
@main.group("db")
def db_group():
    """Schema and procedures."""


@db_group.command("upgrade")
@pass_ctx
@handle_errors
def db_upgrade(c: Context):
    """Migrate to the latest revision and repair drifted or missing procedures
    (on MySQL/MariaDB, create the database first when the server does not have it)."""
    eng = c.engine(migrated=False)
    if db.ensure_database(eng):
        click.echo(f"created database {eng.url.database}")
    repaired = migrate.upgrade(eng)
    click.echo(f"database at revision {migrate.current(eng)}" + (f"; reinstalled {', '.join(repaired)}" if repaired else ""))


@db_group.command("downgrade")
@click.argument("revision")
@pass_ctx
@handle_errors
def db_downgrade(c: Context, revision):
    """Migrate down to REVISION (`base` removes everything)."""
    eng = c.engine(migrated=False)
    migrate.downgrade(eng, revision)
    click.echo(f"database at revision {migrate.current(eng) or 'base'}")


@db_group.command("current")
@pass_ctx
@handle_errors
def db_current(c: Context):
    """Print the current revision."""
    click.echo(migrate.current(c.engine(migrated=False)) or "base (empty)")


@db_group.command("check")
@pass_ctx
@handle_errors
def db_check(c: Context):
    """List missing, drifted or outdated procedures; exit 1 if any."""
    eng = c.engine(migrated=False)
    if migrate.current(eng) is None:
        raise EngineError("the database has no engine schema yet; run `engine db upgrade`")
    with db.connect(eng) as conn:
        findings = procedures.check(conn)
    click.echo(table([(f.name, f.status, f.detail) for f in findings], ["object", "status", "detail"]))
    bad = [f for f in findings if f.status != "ok"]
    if bad:
        click.echo(f"{len(bad)} object(s) not as the sql/ files describe; run `engine db upgrade` to repair", err=True)
        sys.exit(1)


# ---- dags -----------------------------------------------------------------------------------
@main.group()
def dags():
    """DAG definitions and runs."""


@dags.command("sync")
@click.argument("path", required=False)
@click.option("--force", is_flag=True, help="let a file take over a DAG id that another file defines")
@click.option("--check", is_flag=True, help="only parse and validate (for CI): write nothing, no database needed")
@pass_ctx
@handle_errors
def dags_sync(c: Context, path, force, check):
    """Parse the DAG files under PATH and store their definitions (all or nothing)."""
    from engine.dagbag import load_dags
    from engine.dagsync import sync

    cfg = c.cfg()
    path = path or cfg.dags_folder
    dags = load_dags(path, timeout=cfg.dag_import_timeout)  # bad files fail here, before the database is touched
    if check:
        return click.echo(f"ok: {len(dags)} DAG(s) in {path}: {', '.join(d['dag_id'] for d in dags) or '-'}")
    result = sync(c.engine(), path, dags, force=force, paused_at_creation=cfg.dags_are_paused_at_creation)
    click.echo(f"synced {len(result['synced'])} DAG(s): {', '.join(result['synced']) or '-'}"
               + (f"; deactivated: {', '.join(result['deactivated'])}" if result["deactivated"] else ""))


@dags.command("list")
@pass_ctx
@handle_errors
def dags_list(c: Context):
    """The stored DAGs."""
    with db.connect(c.engine()) as conn:
        show(db.run(conn, "dags_list"), "(no DAGs; run `engine dags sync PATH`)")


@dags.command("trigger")
@click.argument("dag_id", callback=checked("dag_id"))
@click.option("--conf", help="JSON object passed to the run")
@click.option("--run-id", callback=checked("run id", run_id=True), help="run id (default manual__<time>)")
@pass_ctx
@handle_errors
def dags_trigger(c: Context, dag_id, conf, run_id):
    """Create a manual run of DAG_ID."""
    parsed = validate.parse_json(conf, "--conf", "an object like '{\"k\": 1}'") if conf else {}
    if not isinstance(parsed, dict):
        raise EngineError("--conf must be a JSON object like '{\"k\": 1}'")
    with db.connect(c.engine()) as conn:
        row = db.run(conn, "trigger_dag", dag_id=dag_id, run_id=run_id, conf=json.dumps(parsed), now=None).one()
    click.echo(f"triggered {dag_id} run {row.run_id}")


def update_dag(c: Context, query: str, dag_id: str, **params) -> None:
    """Run a named statement that updates one active DAG (it returns the dag_id it changed)."""
    with db.connect(c.engine()) as conn:
        found = db.run(conn, query, dag_id=dag_id, **params).first()
    if not found:
        raise EngineError(f"unknown DAG {dag_id!r}; see `engine dags list`")


def _set_paused(c: Context, dag_id: str, paused: bool) -> None:
    update_dag(c, "dag_set_paused", dag_id, paused=paused)
    click.echo(f"{dag_id} {'paused' if paused else 'unpaused'}")


@dags.command("pause")
@click.argument("dag_id", callback=checked("dag_id"))
@pass_ctx
@handle_errors
def dags_pause(c: Context, dag_id):
    """Start no new runs or TIs of DAG_ID (running TIs finish)."""
    _set_paused(c, dag_id, True)


@dags.command("unpause")
@click.argument("dag_id", callback=checked("dag_id"))
@pass_ctx
@handle_errors
def dags_unpause(c: Context, dag_id):
    """Resume DAG_ID."""
    _set_paused(c, dag_id, False)


# ---- pools ----------------------------------------------------------------------------------
@main.group()
def pools():
    """Pools: named slot budgets shared by tasks."""


@pools.command("set", context_settings={"ignore_unknown_options": True})  # so `SLOTS` may be -1
@click.argument("name", callback=checked("pool name"))
@click.argument("slots", type=int)
@click.option("--include-deferred", is_flag=True, help="deferred TIs keep holding their slots")
@click.option("--description")
@pass_ctx
@handle_errors
def pools_set(c: Context, name, slots, include_deferred, description):
    """Create or resize pool NAME to SLOTS (-1: unlimited; 0: closed, its TIs wait)."""
    if slots != -1 and not 0 <= slots <= validate.MAX_SLOTS:
        raise EngineError(f"pool {name!r}: slots must be from 1 to {validate.MAX_SLOTS}, or -1 for unlimited, "
                          f"or 0 to close the pool (its TIs wait) (got {slots})")
    if description is not None:
        validate.check_text(description, "--description", f"pool {name!r}")
    with db.connect(c.engine()) as conn:
        if slots > 0:
            wide = db.run(conn, "pool_widest_task", name=name, slots=slots).first()
            if wide:
                raise EngineError(f"pool {name!r}: {slots} slot(s) is fewer than task {wide.dag_id}.{wide.task_id} "
                                  f"needs (pool_slots={wide.pool_slots}); its TIs could never run: give the pool "
                                  f"at least {wide.pool_slots} slots or lower the task's pool_slots and sync first")
        db.run(conn, "pools_set", name=name, slots=slots, include_deferred=include_deferred, description=description)
    click.echo(f"pool {name}: {'unlimited' if slots == -1 else 'closed (0' if slots == 0 else slots} slots"
               + (": its TIs wait until it is opened)" if slots == 0 else "")
               + (", deferred TIs hold slots" if include_deferred else ""))


@pools.command("list")
@pass_ctx
@handle_errors
def pools_list(c: Context):
    """Pools with their usage."""
    with db.connect(c.engine()) as conn:
        show(db.run(conn, "pools_list"))


@pools.command("delete")
@click.argument("name", callback=checked("pool name"))
@pass_ctx
@handle_errors
def pools_delete(c: Context, name):
    """Delete pool NAME (refused while a task uses it)."""
    if name == "default_pool":
        raise EngineError("default_pool cannot be deleted; resize it with `engine pools set default_pool SLOTS`")
    with db.connect(c.engine()) as conn:
        user = db.run(conn, "pool_users", name=name).first()
        if user:
            raise EngineError(f"pool {name!r} is used by task {user.dag_id}.{user.task_id}; move its tasks to another pool first")
        if db.run(conn, "pools_delete", name=name).rowcount == 0:
            raise EngineError(f"unknown pool {name!r}; see `engine pools list`")
    click.echo(f"pool {name} deleted")


# ---- services -------------------------------------------------------------------------------
@main.command()
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
@pass_ctx
@handle_errors
def tick(c: Context, as_json):
    """One scheduling pass (for cron or a systemd timer), then exit."""
    from engine.scheduler import Scheduler, format_summary

    sched = Scheduler(c.engine(), c.cfg())
    try:
        summary = sched.run_once()
    finally:
        sched.stop()
    click.echo(json.dumps(summary) if as_json else format_summary(summary))
    if summary["errors"]:  # the other steps ran; say which failed, and exit non-zero for cron's mail
        for e in summary["errors"]:
            click.echo(f"error: step {e['step']} failed: {e['error']}", err=True)
        sys.exit(1)


@main.command()
@click.option("--max-ticks", type=click.IntRange(1), help="stop after this many passes")
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="serve Prometheus /metrics here (default: metrics_port)")
@pass_ctx
@handle_errors
def scheduler(c: Context, max_ticks, metrics_port):
    """Tick in a loop until SIGTERM."""
    from engine import metrics
    from engine.scheduler import Scheduler

    sched = Scheduler(c.engine(), c.cfg(metrics_port=metrics_port))
    metrics.serve(c.cfg(), c.engine(), sched.job, "scheduler")
    sched.loop(max_ticks=max_ticks)


@main.command()
@click.option("--queues", help="comma-separated queues (default: worker_queues)")
@click.option("--concurrency", type=click.IntRange(1, 10_000), help="tasks run at once (default: worker_concurrency)")
@click.option("--burst", is_flag=True, help="exit when nothing is queued or running")
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="serve Prometheus /metrics here (default: metrics_port)")
@pass_ctx
@handle_errors
def worker(c: Context, queues, concurrency, burst, metrics_port):
    """Claim queued TIs and run them in subprocesses."""
    from engine import metrics
    from engine.worker import Worker

    cfg = c.cfg(metrics_port=metrics_port)
    qs = [validate.check_id(q.strip(), "queue", "--queues") for q in (queues or cfg.worker_queues).split(",") if q.strip()]
    if not qs:
        raise EngineError("--queues names no queue; pass e.g. --queues default")
    w = Worker(c.engine(), cfg, queues=qs, concurrency=concurrency)
    metrics.serve(cfg, c.engine(), w.job, "worker")
    w.loop(burst=burst)


@main.command()
@click.option("--capacity", type=click.IntRange(1, 1_000_000), help="triggers run at once (default: triggerer_capacity)")
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="serve Prometheus /metrics here (default: metrics_port)")
@pass_ctx
@handle_errors
def triggerer(c: Context, capacity, metrics_port):
    """Run the triggers of deferred TIs (asyncio) until SIGTERM."""
    from engine import metrics
    from engine.triggerer import Triggerer

    t = Triggerer(c.engine(), c.cfg(metrics_port=metrics_port), capacity=capacity)
    metrics.serve(c.cfg(), c.engine(), t.job, "triggerer")
    t.run()


@main.group()
def events():
    """Events that EventTrigger waits for."""


@events.command("send")
@click.argument("key")
@click.option("--payload", help="JSON value the resumed tasks receive as the event (default null)")
@pass_ctx
@handle_errors
def events_send(c: Context, key, payload):
    """Fire every EventTrigger waiting for KEY now (events are not stored)."""
    validate.check_text(key, "event key", allow_empty=False)
    if len(key) > validate.MAX_ID_LENGTH:
        raise EngineError(f"event key is {len(key)} characters long; use at most {validate.MAX_ID_LENGTH}")
    parsed = validate.parse_json(payload, "--payload", "e.g. '{\"rows\": 10}' or '\"done\"'") if payload is not None else None
    cfg = c.cfg()
    with db.connect(c.engine()) as conn:
        n = db.run(conn, "send_event", key=key, payload=json.dumps(parsed), now=None,
                   boost=cfg.resume_priority_boost).scalar_one()
    click.echo(f"event {key}: {n} deferred TI(s) resumed")


# ---- drain ----------------------------------------------------------------------------------
def _set_dag_draining(c: Context, dag_id: str, draining: bool) -> None:
    update_dag(c, "dag_set_draining", dag_id, draining=draining)


@dags.command("drain")
@click.argument("dag_id", callback=checked("dag_id"))
@pass_ctx
@handle_errors
def dags_drain(c: Context, dag_id):
    """Admit nothing new for DAG_ID; running and deferred TIs finish (see `engine drain --status`)."""
    _set_dag_draining(c, dag_id, True)
    click.echo(f"{dag_id} draining: no new runs or TIs start; running and deferred TIs finish "
               f"(`engine drain --status`; `engine undrain {dag_id}` ends it)")


@dags.command("undrain")
@click.argument("dag_id", callback=checked("dag_id"))
@pass_ctx
@handle_errors
def dags_undrain(c: Context, dag_id):
    """End the drain of DAG_ID (same as `engine undrain DAG_ID`)."""
    _undrain(c, dag_id)


@main.command()
@click.option("--status", "show_status", is_flag=True, help="only report what is still in flight")
@pass_ctx
@handle_errors
def drain(c: Context, show_status):
    """Drain the whole deployment: admit nothing new; running and deferred TIs finish."""
    if not show_status:
        with db.connect(c.engine()) as conn:
            db.run(conn, "deployment_set_draining", draining=True)
        click.echo("deployment draining: no new runs or TIs start; running and deferred TIs finish "
                   "(`engine drain --status`; `engine undrain` ends it)")
        return
    with db.connect(c.engine()) as conn:
        flags = db.run(conn, "drain_flags").all()
        result = db.run(conn, "drain_status")
        keys, rows = list(result.keys()), result.all()
    if not flags:
        click.echo("not draining")
        return
    what = ["deployment" + (f" (since {f.since})" if f.since else "") for f in flags if f.scope == "deployment"]
    dags_ = [f.dag_id for f in flags if f.scope == "dag"]
    click.echo("draining: " + ", ".join(what + ([f"dags {', '.join(dags_)}"] if dags_ else [])))
    if not rows:
        click.echo("drained: nothing in flight")
        return
    click.echo(table(rows, keys))
    click.echo(f"{sum(sum(r[1:]) for r in rows)} TI(s) still in flight")


def _undrain(c: Context, dag_id: str | None) -> None:
    if dag_id is None:
        with db.connect(c.engine()) as conn:
            db.run(conn, "deployment_set_draining", draining=False)
        click.echo("drain ended: the deployment and every DAG admit work again")
        return
    _set_dag_draining(c, dag_id, False)
    with db.connect(c.engine()) as conn:
        still = any(f.scope == "deployment" for f in db.run(conn, "drain_flags"))
    click.echo(f"{dag_id} no longer draining" + ("; the whole deployment still drains (`engine undrain`)" if still else ""))


@main.command()
@click.argument("dag_id", required=False, callback=checked("dag_id"))
@pass_ctx
@handle_errors
def undrain(c: Context, dag_id):
    """End a drain: of DAG_ID, or (no argument) of the deployment and every DAG."""
    _undrain(c, dag_id)


@main.command()
@click.option("--json", "as_json", is_flag=True)
@click.option("--check", is_flag=True, help="health check: exit 0 when healthy, else 2 with one line per problem")
@click.option("--max-queued-age", type=Seconds(30 * 86400), help="--check: seconds the oldest queued TI may wait "
              "(default: health_max_queued_age)")
@pass_ctx
@handle_errors
def status(c: Context, as_json, check, max_queued_age):
    """Pools, queue depth, running TIs, recent runs and live jobs, from the SQL views."""
    if check:
        from cli.ops import status_check
        return status_check(c, as_json, max_queued_age)
    sections = [("dag errors", "status_dag_errors"), ("pools", "status_pools"), ("queues", "status_queues"), ("why pending", "status_pending"),
                ("running", "status_running"),
                ("recent runs", "status_runs"), ("live jobs", "status_jobs")]
    with db.connect(c.engine()) as conn:
        results = {title: db.run(conn, q) for title, q in sections}
        data = {title: (list(r.keys()), r.all()) for title, r in results.items()}
    if as_json:
        click.echo(json.dumps({t: [dict(zip(k, row)) for row in rows] for t, (k, rows) in data.items()},
                              default=str, indent=2))
        return
    for title, (keys, rows) in data.items():
        click.echo(f"== {title}")
        click.echo(table(rows, keys) if rows else "(none)")
        click.echo()


@main.command()
@click.option("--timeout", type=Seconds(86400), default=300, show_default=True,
              help="give up after this many seconds")
@click.option("--database-url", help="database to run the demo on (same as `engine --database-url URL demo`)")
@pass_ctx
@handle_errors
def demo(c: Context, timeout, database_url):
    """Sync the sample DAGs, trigger them and run scheduler and worker until every run ends.
    A database that is empty (or, on MySQL/MariaDB, missing) is created and migrated first."""
    from engine.demo import run_demo

    if database_url:
        c.cfg(database_url=database_url)
    eng = c.engine(migrated=False)
    if db.ensure_database(eng):
        click.echo(f"created database {eng.url.database}", err=True)
    try:
        current = migrate.current(eng)
    except sa.exc.OperationalError as exc:
        raise db.describe_connect_error(eng.url.render_as_string(hide_password=False), exc) from None
    if current is None:
        migrate.upgrade(eng)
        click.echo(f"migrated the empty database to revision {migrate.head()}", err=True)
    elif current != migrate.head():
        raise EngineError(f"database schema is at {current}, not {migrate.head()}; run `engine db upgrade`")
    sys.exit(run_demo(eng, c.cfg(), timeout=timeout))


# ---- sql ------------------------------------------------------------------------------------
@main.group("sql")
def sql_group():
    """The SQL files."""


@sql_group.command("lint")
@click.argument("path", required=False, type=click.Path(exists=True, file_okay=True, dir_okay=True))
@handle_errors
def sql_lint(path):
    """Check the SQL files under PATH (default: the engine's sql/ folder) without a database:
    PostgreSQL files and PL/pgSQL bodies parse; MySQL files define their objects; exit 1 with
    one `file:line: message` line per problem."""
    from engine.lint import lint
    from engine.paths import SQL_DIR

    files, problems = lint(Path(path).resolve() if path else SQL_DIR)
    for p in problems:
        click.echo(str(p))
    if problems:
        raise EngineError(f"{len(problems)} problem(s) in {len({p.path for p in problems})} of {len(files)} SQL file(s)")
    pg = sum(1 for f in files if "mysql" not in f.parts)
    click.echo(f"{len(files)} SQL file(s) checked: {pg} PostgreSQL (statements and PL/pgSQL bodies parse), "
               f"{len(files) - pg} MySQL (each defines its object; blocks balance)")


from cli.ops import register as _register_ops  # noqa: E402  (db clean, metrics, db url/shell: cli/ops.py)
_register_ops(main)


if __name__ == "__main__":
    main()
