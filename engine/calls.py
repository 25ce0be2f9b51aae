"""Which version of each stored procedure a service calls.

The named queries in ``sql/<dialect>/queries/`` name the version this release was written for
(``queue_tis_v2(...)``: the *shipped* version). A DBA who adds a tuned ``queue_tis_v3`` through
a revision moves the services onto it one by one:

- by default a service calls the **newest installed** version of each procedure whose
  arguments and result are those of the shipped one (installed: recorded in
  ``procedure_version`` by a migration and present in the schema);
- the setting ``procedure_versions`` (``"queue_tis=2,schedule_tis=1"``) pins versions for the
  service that reads it; a pinned version must be installed and take the same arguments and
  return the same result as the shipped one, or the service refuses to start, in one line.

The choice is made once, when the service opens its database (:func:`pin`), and travels with
the SQLAlchemy engine as the execution option ``engine_calls``: ``db.run`` rewrites the calls
of the shipped version in each named statement it sends (a statement written for an older
version of the same procedure, e.g. a scheduler's heartbeat_v1 beside the worker's
heartbeat_v2, is left alone). Restart a service to make it choose again.
"""
from __future__ import annotations

import functools
import re

from engine import db, procedures
from engine.errors import EngineError
from engine.paths import SQL_DIR

CALL = re.compile(r"\b([a-z][a-z0-9_]*?)_v(\d+)\s*\(")
PIN = re.compile(r"^([a-z][a-z0-9_]*)=v?(\d{1,4})$")


@functools.cache
def shipped(dialect: str) -> dict[str, int]:
    """{base: version} of every versioned routine the named queries of `dialect` call (the
    newest, when statements call several versions of one procedure)."""
    found: dict[str, int] = {}
    for path in sorted((SQL_DIR / dialect / "queries").glob("*.sql")):
        code = re.sub(r"--[^\n]*", "", path.read_text())
        for base, version in CALL.findall(code):
            found[base] = max(found.get(base, 0), int(version))
    return found


def called_by(dialect: str, query: str, base: str) -> int | None:
    """The version of `base` that the named query `query` calls (the newest, if several)."""
    code = re.sub(r"--[^\n]*", "", (SQL_DIR / dialect / "queries" / f"{query}.sql").read_text())
    versions = [int(v) for b, v in CALL.findall(code) if b == base]
    return max(versions) if versions else None


def known_bases() -> set[str]:
    return set(shipped("postgresql")) | set(shipped("mysql"))


def parse_pins(text: str, where: str = "setting procedure_versions") -> dict[str, int]:
    """'queue_tis=2, schedule_tis=1' as {base: version}; EngineError naming the bad entry."""
    pins: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        m = PIN.match(entry.replace(" ", ""))
        if not m:
            raise EngineError(f"{where}: {entry!r} is not NAME=VERSION; write e.g. 'queue_tis=2'")
        base, version = m.group(1), int(m.group(2))
        if base not in known_bases():
            raise EngineError(f"{where}: the engine calls no procedure {base!r}; pin one of "
                              f"{', '.join(sorted(known_bases()))}")
        if version < 1:
            raise EngineError(f"{where}: {entry!r}: versions start at 1")
        if base in pins and pins[base] != version:
            raise EngineError(f"{where}: {base} is pinned twice ({pins[base]} and {version}); keep one")
        pins[base] = version
    return pins


def recorded(conn) -> set[str]:
    """The names of the procedures and views a migration installed (procedure_version)."""
    return {row.name for row in db.run(conn, "recorded_procedures")}


def installed(conn, names: set[str] | None = None) -> dict[str, dict[int, str]]:
    """{base: {version: signature}} of the versioned routines a migration installed (`names`:
    recorded(), when already read) and the schema holds; the signature is the argument types
    and the result, as the server shows them."""
    names = recorded(conn) if names is None else names
    found: dict[str, dict[int, str]] = {}
    for row in db.run(conn, "routine_signatures"):
        m = procedures.VERSIONED.match(row.name)
        if m and row.name in names:
            found.setdefault(m["base"], {})[int(m["version"])] = f"({row.args or ''}) -> {row.result or ''}"
    return found


def resolve(conn, pins: dict[str, int] | None = None) -> dict[str, int]:
    """{base: version} this service is to call, for every procedure the named queries call."""
    pins = pins or {}
    ships_all = shipped(db.dialect_dir(conn))
    names = recorded(conn)
    newer = any(m and int(m["version"]) > ships_all.get(m["base"], 1 << 30)
                for m in map(procedures.VERSIONED.match, names))
    if not pins and not newer:
        # Nothing newer than what the named statements call is installed: the rule below picks
        # the shipped version of every procedure, whatever the signatures (reading them costs
        # seconds on a MariaDB server with many databases: information_schema.PARAMETERS).
        return dict(ships_all)
    have = installed(conn, names)
    chosen: dict[str, int] = {}
    for base, ships in ships_all.items():
        versions = have.get(base, {})
        signature = versions.get(ships)
        if base in pins:
            want = pins[base]
            if want not in versions:
                listed = ", ".join(f"v{v}" for v in sorted(versions)) or "none"
                raise EngineError(f"setting procedure_versions: {base}_v{want} is not installed by a migration (installed: "
                                  f"{listed}); run `engine db upgrade` or pin an installed version")
            if signature is not None and versions[want] != signature:
                raise EngineError(f"setting procedure_versions: {base}_v{want} takes {versions[want]}, but this "
                                  f"release calls {base} as {signature} (v{ships}); pin a version with the same "
                                  f"arguments and result")
            chosen[base] = want
        elif signature is None:
            chosen[base] = ships  # not installed yet: the call fails with the server's own error
        else:
            chosen[base] = max(v for v, s in versions.items() if s == signature)
    return chosen


def pin(eng, procedure_versions: str = ""):
    """`eng` with the versions this service calls chosen (see the module docstring); the
    returned engine shares `eng`'s connection pool."""
    pins = parse_pins(procedure_versions)
    with db.connect(eng) as conn:
        chosen = resolve(conn, pins)
    return eng.execution_options(engine_calls=moves(db.dialect_dir(eng), chosen))


def moves(dialect: str, chosen: dict[str, int]) -> tuple:
    """(base, shipped version, chosen version) for each procedure whose chosen version is not
    the one the named statements call: what db.with_versions rewrites."""
    ships = shipped(dialect)
    return tuple(sorted((base, ships[base], v) for base, v in chosen.items() if v != ships.get(base)))


def calling(eng_or_conn) -> dict[str, int]:
    """{base: version} the engine (or connection) calls: the shipped versions, moved by pin()."""
    chosen = dict(shipped(db.dialect_dir(eng_or_conn)))
    chosen.update({base: v for base, _, v in eng_or_conn.get_execution_options().get("engine_calls", ())})
    return chosen
