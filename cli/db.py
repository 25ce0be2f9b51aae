"""`engine db ...`: schema and procedure versions, drift."""
from __future__ import annotations

import json
import sys

import click

from cli.common import Context, Seconds, handle_errors, pass_ctx
from engine import db, migrate, procedures
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
    files = [f for f in bad if f.status in ("changed-released", "deleted-released")]
    if files:
        click.echo(f"{len(files)} released file(s) changed; restore them: a change is a new _vN file and revision",
                   err=True)
    if len(bad) > len(files):
        click.echo(f"{len(bad) - len(files)} object(s) not as the sql/ files describe; run `engine db upgrade` to "
                   f"repair", err=True)
    if bad:
        sys.exit(1)


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
    defaults = {"max_tis": cfg.max_tis, "batch": cfg.schedule_batch}
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
