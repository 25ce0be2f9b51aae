"""What a DBA asks of the procedures: what each costs (`engine db procedures`) and the plan of
every statement inside one (`engine db explain`).

Cost comes from the server's own counters: pg_stat_user_functions on PostgreSQL (only while
track_functions is 'pl' or 'all'), performance_schema's program summaries on MariaDB/MySQL
(only while performance_schema is ON); the listing says when the server is not counting.

`explain` calls a procedure through its named query, inside a transaction that is rolled
back: it sees the real state and changes nothing. PostgreSQL: auto_explain with nested
statements, ANALYZE and timing, its plans sent to this session as notices (LOAD needs a
superuser, or auto_explain in session_preload_libraries). MariaDB/MySQL cannot show the plan of
a statement inside a stored program: the closest is the profiler (SHOW PROFILES), which times
every statement the call runs, in order; a plan needs the statement run on its own.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

import sqlalchemy as sa

from engine import calls, config, db, procedures, validate
from engine.errors import EngineError


@dataclass
class Cost:
    name: str
    kind: str
    version: int | None
    revision: str | None
    status: str
    file_checksum: str | None
    db_checksum: str | None
    called: str            # 'yes' (this service calls it), 'pinned' (by procedure_versions), ''
    calls: int | None
    total_ms: float | None

    @property
    def mean_ms(self) -> float | None:
        return self.total_ms / self.calls if self.calls and self.total_ms is not None else None


def costs(conn, pins: dict[str, int]) -> tuple[list[Cost], str | None]:
    """One row per object of the schema (installed or expected), and a note when the server does
    not count calls."""
    chosen = calls.resolve(conn, pins)
    recorded = {r.name: r for r in conn.execute(sa.text(
        "SELECT name, kind, file_checksum, db_checksum, revision FROM procedure_version"))}
    collection = db.run(conn, "stats_collection").one()
    stats = {r.name: r for r in db.run(conn, "routine_stats")}
    note = None if collection.collected else (
        f"the server does not count calls ({collection.setting}); see docs/procedures.md, 'For DBAs'")
    rows = []
    for f in procedures.check(conn):
        if "/" in f.name:
            continue  # a released file, not an object (engine db check reports it)
        rec = recorded.get(f.name)
        m = procedures.VERSIONED.match(f.name)
        version = int(m["version"]) if m else None
        called = ""
        if m and chosen.get(m["base"]) == version:
            called = "pinned" if m["base"] in pins else "yes"
        s = stats.get(f.name)
        rows.append(Cost(f.name, rec.kind if rec else "", version, rec.revision if rec else None, f.status,
                         rec.file_checksum if rec else None, rec.db_checksum if rec else None, called,
                         int(s.calls) if s else (0 if collection.collected and rec and rec.kind != "view" else None),
                         float(s.total_ms) if s else None))
    return rows, note


# ---- explain ------------------------------------------------------------------------------------

@dataclass
class Statement:
    ms: float
    text: str
    plan: str = ""


@dataclass
class Explained:
    call: str
    statements: list[Statement] = field(default_factory=list)
    total_ms: float | None = None
    note: str | None = None


def parse_arg(text: str) -> tuple[str, object]:
    """'k=v' as (k, value): null, integers, numbers, JSON lists/objects, else the text."""
    if "=" not in text:
        raise EngineError(f"--arg {text!r}: write NAME=VALUE, e.g. --arg max_tis=32")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", key):
        raise EngineError(f"--arg {text!r}: {key!r} is not a parameter name")
    validate.check_text(raw, key, "--arg")
    if not raw:
        raise EngineError(f"--arg {key}= has no value: write --arg {key}=null for NULL, or give a value")
    if raw.lower() == "null":
        return key, None
    if re.fullmatch(r"-?\d{1,20}", raw):  # explain() refuses one outside its parameter's range
        return key, int(raw)
    if raw[:1] in "[{":
        return key, validate.parse_json(raw, f"--arg {key}", '["default"]')
    try:
        number = float(raw)
    except ValueError:
        return key, raw
    if not math.isfinite(number):
        raise EngineError(f"--arg {key}: {raw!r} is not a finite number")
    return key, number


# Parameters a named query may leave out: the database's clock, no job, the settings' sizes.
OPTIONAL = {"now": None, "job_id": None, "aging_rate": 0.0, "aging_cap": 1, "reserve_after": 0.0}

# Parameters that stand for a setting: an --arg keeps to the range the services could pass (the
# procedures are written for it: queue_tis_v18 overflows a 32-bit integer past it on PostgreSQL).
SETTING_OF = {"max_tis": "max_tis", "batch": "schedule_batch", "aging_rate": "priority_aging",
              "aging_cap": "priority_aging_cap", "reserve_after": "reserve_after"}


def target(dialect: str, procedure: str) -> tuple[str, int | None]:
    """'queue_tis' or 'queue_tis_v1' as (named query, version or None for the one called)."""
    m = procedures.VERSIONED.match(procedure)
    base, version = (m["base"], int(m["version"])) if m else (procedure, None)
    shipped = calls.shipped(dialect)
    if base not in shipped:
        raise EngineError(f"no procedure {procedure!r} to explain; name one of {', '.join(sorted(shipped))}")
    return base, version


def params_of(dialect: str, name: str, given: dict[str, object], defaults: dict[str, object]) -> dict:
    wanted = []
    for stmt in db._statements(dialect, name):
        wanted += [p for p in stmt.compile().params if p not in wanted]
    unknown = sorted(set(given) - set(wanted))
    if unknown:
        raise EngineError(f"{name} takes no parameter {unknown[0]!r}; its parameters: {', '.join(wanted)}")
    values = {**OPTIONAL, **defaults, **given}
    missing = [p for p in wanted if p not in values]
    if missing:
        raise EngineError(f"{name} needs --arg {missing[0]}=VALUE (its parameters: {', '.join(wanted)})")
    return {p: values[p] for p in wanted}


def explain(eng, procedure: str, given: dict[str, object], defaults: dict[str, object],
            pins: dict[str, int] | None = None, timeout_s: float = 60.0) -> Explained:
    dialect = db.dialect_dir(eng)
    name, version = target(dialect, procedure)
    params = params_of(dialect, name, given, defaults)
    # A named query written for an older version than the shipped one (the scheduler's
    # heartbeat_v1 beside the worker's heartbeat_v2) is not moved: label what it really calls.
    called = calls.called_by(dialect, name, name)
    with db.connect(eng) as conn:  # queue_tis_v0 is refused as not installed, like queue_tis_v999
        chosen = calls.resolve(conn, {**(pins or {}), **({name: version} if version is not None else {})})
        call = f"{name}_v{chosen[name] if called in (None, calls.shipped(dialect)[name]) else called}"
        _check_integers(conn, dialect, call, given)
    for key, setting in SETTING_OF.items():
        if params.get(key) is not None:
            params[key] = config.check(setting, params[key], f"--arg {key}")
    run = _explain_postgresql if dialect == "postgresql" else _explain_mysql
    timeout_ms = max(1, round(timeout_s * 1000))  # statement_timeout = 0 would mean no limit at all
    try:
        return run(eng.execution_options(engine_calls=calls.moves(dialect, chosen)), name, call, params, timeout_ms)
    except sa.exc.DBAPIError as exc:
        if db.is_timeout(exc):  # statement_timeout, max_statement_time
            raise EngineError(f"{call} ran longer than --timeout {timeout_ms / 1000:g} s; raise --timeout") from None
        raise


# An integer parameter's range by its type as information_schema.parameters shows it.
_INT_BITS = {"smallint": 16, "integer": 32, "int": 32, "bigint": 64}


def _check_integers(conn, dialect: str, routine: str, given: dict[str, object]) -> None:
    """Refuse an integer --arg outside the range of the routine's parameter p_<name>: PostgreSQL
    would look for a function taking bigint or numeric, and the error names neither."""
    ints = {k: v for k, v in given.items() if type(v) is int}
    if not ints:
        return
    if dialect == "postgresql":
        rows = conn.execute(sa.text(
            "SELECT p.parameter_name, p.data_type FROM information_schema.parameters p "
            "JOIN information_schema.routines r USING (specific_catalog, specific_schema, specific_name) "
            "WHERE r.routine_schema = current_schema() AND r.routine_name = :routine"), {"routine": routine})
    else:
        rows = conn.execute(sa.text(
            "SELECT parameter_name, data_type FROM information_schema.parameters "
            "WHERE specific_schema = DATABASE() AND specific_name = :routine"), {"routine": routine})
    for parameter, data_type in rows:
        key, bits = (parameter or "").removeprefix("p_"), _INT_BITS.get(str(data_type).lower())
        if key in ints and bits and not -(1 << bits - 1) <= ints[key] < 1 << bits - 1:
            raise EngineError(f"--arg {key}={ints[key]} is out of range: {routine} takes a {bits}-bit integer "
                              f"({-(1 << bits - 1)} to {(1 << bits - 1) - 1})")


# "duration: 0.4 ms  plan:\nQuery Text: <the statement, maybe several lines>\n<plan>": the plan
# starts at the first unindented line with a cost (the root node).
_NOTICE = re.compile(r"duration: ([\d.]+) ms\s+plan:\s*\nQuery Text: (.*?)\n(\S[^\n]*\(cost=\d.*)", re.S)


_MARK = "engine db explain: measured call"


def _warm_up(conn, name, params) -> None:
    """Call once and roll back to a savepoint: the measured call then runs on the same state with
    the routine compiled and its statements run once. PostgreSQL's queue_tis (v5 on) creates its
    scratch tables at its first call of a session, and a rollback to a savepoint would drop them
    with everything made after it, so the measured call would make them again and plan every
    statement that reads them: a session's first call, not a running scheduler's. So it is first
    called with max_tis 0, outside the savepoint: that call queues nothing (it takes the lock,
    folds and makes its tables), and the tables outlive the rollback."""
    if name == "queue_tis" and conn.dialect.name == "postgresql" and "max_tis" in params:
        db.run(conn, name, **{**params, "max_tis": 0}).all()
    savepoint = conn.begin_nested()
    try:
        db.run(conn, name, **params).all()
    finally:
        savepoint.rollback()


def _explain_postgresql(eng, name, call, params, timeout_ms) -> Explained:
    out = Explained(call)
    conn = eng.connect()
    try:
        raw = conn.connection.dbapi_connection
        notices: list[str] = []
        handler = lambda diag: notices.append(diag.message_primary or "")  # noqa: E731
        raw.add_notice_handler(handler)
        trans = conn.begin()
        try:
            _warm_up(conn, name, params)
            try:
                conn.execute(sa.text("LOAD 'auto_explain'"))
            except sa.exc.DBAPIError as exc:
                raise EngineError(f"cannot load auto_explain ({db.error_message(exc)}); run as a superuser, or add "
                                  f"auto_explain to session_preload_libraries") from None
            for setting, value in (("log_min_duration", "0"), ("log_nested_statements", "on"), ("log_analyze", "on"),
                                   ("log_timing", "on"), ("log_buffers", "on"), ("log_level", "notice")):
                conn.execute(sa.text(f"SET LOCAL auto_explain.{setting} = {value}"))
            conn.execute(sa.text(f"SET LOCAL statement_timeout = {timeout_ms}"))
            db.run(conn, name, **params).all()
        finally:
            trans.rollback()
            raw.remove_notice_handler(handler)
    finally:
        conn.close()
    for text in notices:
        m = _NOTICE.match(text)
        if m:
            out.statements.append(Statement(float(m.group(1)), m.group(2).strip(), m.group(3).rstrip()))
    if out.statements:
        out.total_ms = out.statements[-1].ms  # the outermost statement (the call) is logged last
    return out


def _explain_mysql(eng, name, call, params, timeout_ms) -> Explained:
    out = Explained(call, note="MariaDB/MySQL cannot show the plan of a statement inside a stored program: these are "
                               "the profiler's times of each statement the call ran (SHOW PROFILES). For a plan, run "
                               "one statement on its own with ANALYZE FORMAT=JSON (MariaDB) or EXPLAIN ANALYZE (MySQL).")
    conn = eng.connect()
    try:
        trans = conn.begin()
        try:
            conn.execute(sa.text("SET profiling = 1"))
            conn.execute(sa.text("SET profiling_history_size = 100"))
            if conn.dialect.is_mariadb:
                conn.execute(sa.text(f"SET SESSION max_statement_time = {timeout_ms / 1000:g}"))
            _warm_up(conn, name, params)
            conn.execute(sa.text(f"SELECT '{_MARK}'"))
            db.run(conn, name, **params).all()
        finally:
            trans.rollback()
        rows = conn.execute(sa.text("SHOW PROFILES")).all()
        conn.execute(sa.text("SET profiling = 0"))
        conn.rollback()
    finally:
        conn.close()
    start = max((i for i, r in enumerate(rows) if _MARK in str(r[2])), default=-1)
    rows = rows[start + 1:]
    skip = re.compile(r"^(SET (profiling|SESSION max_statement_time)|SHOW PROFILES|ROLLBACK|BEGIN|START TRANSACTION)", re.I)
    for r in rows:
        text = str(r[2])
        if not skip.match(text):
            out.statements.append(Statement(float(r[1]) * 1000.0, text.replace("\\n", "\n")))
    out.total_ms = sum(s.ms for s in out.statements if not s.text.upper().startswith("CALL"))
    if len(rows) >= 100:
        out.note += " The profiler keeps the last 100 statements: earlier ones are not shown."
    return out


def as_json(explained: Explained) -> str:
    return json.dumps({"call": explained.call, "total_ms": explained.total_ms, "note": explained.note,
                       "statements": [s.__dict__ for s in explained.statements]}, indent=2)
