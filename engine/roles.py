"""Least privilege: one database role per kind of service (`engine db roles`).

  <prefix>_scheduler   reads and writes every table, executes every procedure (it also runs
                       `dags sync`, `pools set` and the other admin commands of a deployment)
  <prefix>_worker      EXECUTE on the procedures a worker calls, nothing else (also what a Celery
                       worker of the celery executor needs; `engine dispatcher` runs as scheduler)
  <prefix>_triggerer   EXECUTE on the procedures a triggerer calls, nothing else
  <prefix>_reader      SELECT on the views (pool_usage, pending_reasons, ...) for SQL consoles

Workers and triggerers read no table: their procedures run with their owner's rights
(PostgreSQL: SECURITY DEFINER with search_path pinned to the schema and pg_temp; MariaDB/MySQL:
SQL SECURITY DEFINER, their default), so a worker cannot UPDATE task_instance, read the conf of
runs it does not run, or call queue_tis. Every role may read alembic_version and
procedure_version (the revision and versions a service checks at start).

The roles are NOLOGIN groups: grant one to each login user (`GRANT engine_worker TO alice;`,
MariaDB also `SET DEFAULT ROLE engine_worker FOR alice;`). A reinstalled or new procedure loses
its grants (PostgreSQL: CREATE OR REPLACE resets SECURITY DEFINER), so `engine db upgrade`
applies them again when the roles exist.
"""
from __future__ import annotations

import re

import sqlalchemy as sa

from engine import db, procedures
from engine.errors import EngineError

# start_ti: a Celery worker (engine celery-worker) runs as a worker; `engine dispatcher` calls
# dispatch_tis, which only the scheduler role may (run it as a scheduler).
WORKER = ["claim_tis", "finish_ti", "finish_tis", "task_inputs", "defer_ti", "release_ti", "heartbeat", "register_job",
          "finish_job", "set_job_queues", "pending_work", "start_ti"]
TRIGGERER = ["claim_triggers", "fire_trigger", "fire_triggers", "heartbeat", "register_job", "finish_job", "owned_triggers",
             "release_triggers"]
KINDS = ("scheduler", "worker", "triggerer", "reader")
METADATA = ["alembic_version", "procedure_version"]
PREFIX_RULE = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


def check_prefix(prefix: str) -> str:
    if not PREFIX_RULE.match(prefix or ""):
        raise EngineError(f"role prefix {prefix!r} is not valid; use lower-case letters, digits and '_' (at most 41), "
                          f"e.g. engine")
    return prefix


def names(prefix: str) -> dict[str, str]:
    check_prefix(prefix)
    return {kind: f"{prefix}_{kind}" for kind in KINDS}


def _routines(conn) -> dict[str, str]:
    """{routine name: how GRANT/ALTER name it} of the engine's recorded routines."""
    recorded = {r.name: r.kind for r in conn.execute(sa.text("SELECT name, kind FROM procedure_version"))}
    if db.dialect_dir(conn) == "postgresql":
        rows = conn.execute(sa.text(
            "SELECT p.proname AS name, p.oid::regprocedure::text AS sig FROM pg_proc p "
            "WHERE p.pronamespace = current_schema()::regnamespace ORDER BY p.oid")).all()
        found: dict[str, str] = {}
        for r in rows:
            if recorded.get(r.name) == "function":
                found.setdefault(r.name, r.sig)  # the oldest: a migration's (an extra overload is not granted)
        return found
    return {name: f"{kind.upper()} `{name}`" for name, kind in recorded.items() if kind in ("function", "procedure")}


def _of(bases: list[str], routines: dict[str, str]) -> list[str]:
    return sorted(n for n in routines if (m := procedures.VERSIONED.match(n)) and m["base"] in bases)


def statements(conn, prefix: str) -> list[str]:
    """The SQL that creates the roles (when missing) and grants them their rights in the
    current schema (database); running it again changes nothing."""
    role = names(prefix)
    routines = _routines(conn)
    views = sorted(n for n, k in conn.execute(sa.text("SELECT name, kind FROM procedure_version")) if k == "view")
    worker, triggerer = _of(WORKER, routines), _of(TRIGGERER, routines)
    if db.dialect_dir(conn) == "postgresql":
        schema = conn.execute(sa.text("SELECT current_schema()")).scalar_one()
        everyone = ", ".join(role.values())
        out = [f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{r}') THEN "
               f"CREATE ROLE {r} NOLOGIN; END IF; END $$" for r in role.values()]
        out += [f"GRANT USAGE ON SCHEMA {schema} TO {everyone}",
                f"REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} FROM PUBLIC",
                f"GRANT SELECT ON {', '.join(METADATA)} TO {everyone}",
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role['scheduler']}",
                f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role['scheduler']}",
                f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {role['scheduler']}"]
        if views:
            out.append(f"GRANT SELECT ON {', '.join(views)} TO {role['reader']}")
        for name in sorted(set(worker) | set(triggerer)):
            out.append(f"ALTER FUNCTION {routines[name]} SECURITY DEFINER SET search_path = {schema}, pg_temp")
        out += [f"GRANT EXECUTE ON FUNCTION {routines[n]} TO {role['worker']}" for n in worker]
        out += [f"GRANT EXECUTE ON FUNCTION {routines[n]} TO {role['triggerer']}" for n in triggerer]
        return out
    database = conn.execute(sa.text("SELECT DATABASE()")).scalar_one()
    q = f"`{database}`"
    out = [f"CREATE ROLE IF NOT EXISTS {r}" for r in role.values()]
    out.append(f"GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE, SHOW VIEW ON {q}.* TO {role['scheduler']}")
    for kind in ("worker", "triggerer", "reader"):
        out += [f"GRANT SELECT ON {q}.`{t}` TO {role[kind]}" for t in METADATA]
    out += [f"GRANT SELECT ON {q}.`{v}` TO {role['reader']}" for v in views]
    out += [_grant_routine(routines[n], q, role["worker"]) for n in worker]
    out += [_grant_routine(routines[n], q, role["triggerer"]) for n in triggerer]
    return out


def _grant_routine(named: str, database: str, role: str) -> str:
    kind, name = named.split(" ", 1)
    return f"GRANT EXECUTE ON {kind} {database}.{name} TO {role}"


def apply(conn, prefix: str) -> list[str]:
    done = statements(conn, prefix)
    for stmt in done:
        conn.exec_driver_sql(stmt)
    return done


def exist(conn, prefix: str) -> bool:
    """Whether `engine db roles --apply` made this prefix's roles on the server."""
    role = names(prefix)["worker"]
    if db.dialect_dir(conn) == "postgresql":
        sql = "SELECT 1 FROM pg_roles WHERE rolname = :r"
    else:
        sql = "SELECT 1 FROM mysql.user WHERE user = :r AND is_role = 'Y'"
    try:
        with conn.begin_nested():
            return conn.execute(sa.text(sql), {"r": role}).first() is not None
    except sa.exc.DBAPIError:
        return False  # not allowed to read the role list: not the schema owner


def default_prefix(eng) -> str:
    """The deployment's schema (setting schema), else 'engine': roles are per server (cluster),
    so two deployments on one server get roles of their own."""
    return db.engine_schema(eng) or "engine"


def reapply(eng) -> list[str]:
    """After an upgrade: the grants again, when this deployment's roles exist (a reinstalled or
    new procedure has none)."""
    prefix = default_prefix(eng)
    with db.connect(eng) as conn:
        if not exist(conn, prefix):
            return []
        return apply(conn, prefix)
