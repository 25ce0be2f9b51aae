"""Versioned schema objects: one file per stored function / procedure / view in sql/<dialect>/.

A function's name carries its version (``queue_tis_v2``) so old and new schedulers both work
during a rolling upgrade; views keep a stable name. Alembic revisions call :func:`install`
and :func:`remove`; every install is recorded in ``procedure_version`` with the file's
checksum and the checksum of the definition as the database reports it, so :func:`check`
can tell a DBA's hand edit (drift) from a file changed since install (outdated).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from engine import manifest
from engine.errors import EngineError
from engine.paths import SQL_DIR

VERSIONED = re.compile(r"^(?P<base>.+)_v(?P<version>\d+)$")


def dialect_of(conn) -> str:
    return "postgresql" if conn.dialect.name == "postgresql" else "mysql"


def object_file(dialect: str, name: str) -> Path:
    return SQL_DIR / dialect / f"{name}.sql"


def file_checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def object_kind(dialect: str, name: str, text: str) -> str:
    """'function' or 'view', read from the file; the object must be named like its file."""
    if dialect == "postgresql":
        import pglast

        stmt = pglast.parse_sql(text)[0].stmt
        kind = type(stmt).__name__
        if kind == "CreateFunctionStmt":
            found, what = stmt.funcname[-1].sval, "function"
        elif kind == "ViewStmt":
            found, what = stmt.view.relname, "view"
        else:
            raise ValueError(f"{name}.sql: expected CREATE FUNCTION or CREATE VIEW, found {kind}")
    else:
        code = re.sub(r"--[^\n]*", "", text)  # a comment may mention CREATE ...
        m = re.search(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:DEFINER\s*=\s*\S+\s+)?(FUNCTION|PROCEDURE|VIEW)\s+`?(\w+)`?",
                      code, re.I)
        if not m:
            raise ValueError(f"{name}.sql: expected CREATE FUNCTION, PROCEDURE or VIEW")
        what, found = m.group(1).lower(), m.group(2)
    if found != name:
        raise ValueError(f"{name}.sql defines {found}; a file must define the object it is named after")
    return what


def _checksum_sql(dialect: str, view: bool, where: str) -> str:
    """(name, checksum) of each view, or each function and procedure, of the schema; `where`
    narrows it ("" for all, or a condition on the name's column as `{name} = :n`)."""
    if dialect == "postgresql":
        if view:
            return ("SELECT c.relname, md5(pg_get_viewdef(c.oid)) FROM pg_class c "
                    "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'v' "
                    + where.format(name="c.relname"))
        # With a hand-made overload beside it (check() reports it), the oldest definition is the
        # one a migration installed (CREATE OR REPLACE keeps its oid).
        # Without the lines `engine db roles` adds (SECURITY DEFINER, a pinned search_path):
        # granting rights is not a change of the definition.
        # (pg_get_functiondef prints it alone on a line, or after STABLE on the same one.)
        return ("SELECT DISTINCT ON (p.proname) p.proname, md5(regexp_replace(regexp_replace(pg_get_functiondef(p.oid), "
                "'^ (SECURITY DEFINER|SET search_path TO .*)\\n', '', 'gn'), "
                "'^( [A-Z][A-Z ]*) SECURITY DEFINER$', '\\1', 'gn')) FROM pg_proc p "
                "WHERE p.pronamespace = current_schema()::regnamespace " + where.format(name="p.proname")
                + " ORDER BY p.proname, p.oid")
    if view:
        return ("SELECT table_name, md5(view_definition) FROM information_schema.views "
                "WHERE table_schema = DATABASE() " + where.format(name="table_name"))
    # The body (routine_definition), the return type and every parameter: a hand edit of any of
    # them changes the checksum. (SHOW CREATE would do, but is not a SELECT.) The parameters are
    # grouped once in a derived table: information_schema.parameters read per routine (a
    # correlated subquery) opens every routine each time (2.3 s for 88 routines on MariaDB).
    return ("SELECT r.routine_name, md5(CONCAT_WS('|', r.routine_type, r.routine_definition, r.dtd_identifier, "
            "  r.sql_data_access, r.is_deterministic, p.params)) "
            "FROM information_schema.routines r "
            "LEFT JOIN (SELECT specific_name, routine_type, GROUP_CONCAT(CONCAT_WS(' ', parameter_mode, "
            "                  parameter_name, dtd_identifier) ORDER BY ordinal_position) AS params "
            "           FROM information_schema.parameters "
            "           WHERE specific_schema = DATABASE() AND ordinal_position > 0 "
            "           GROUP BY specific_name, routine_type) p "
            "  ON p.specific_name = r.specific_name AND p.routine_type = r.routine_type "
            "WHERE r.routine_schema = DATABASE() " + where.format(name="r.routine_name"))


def db_checksum(conn, dialect: str, name: str, kind: str) -> str | None:
    """Checksum of the definition the database holds now, or None when the object is absent."""
    import sqlalchemy as sa

    row = conn.execute(sa.text(_checksum_sql(dialect, kind == "view", "AND {name} = :n")), {"n": name}).first()
    return row[1] if row else None


def db_checksums(conn, dialect: str) -> dict[tuple[str, bool], str]:
    """{(name, is a view): checksum} of every view and routine the schema holds now, in two
    queries (db_checksum per object costs MariaDB ~10 ms each: information_schema)."""
    import sqlalchemy as sa

    return {(name, view): checksum for view in (False, True)
            for name, checksum in conn.execute(sa.text(_checksum_sql(dialect, view, "")))}


def installed_routines(conn) -> set[str]:
    """Names of every stored function and procedure in the current schema (database)."""
    import sqlalchemy as sa

    if dialect_of(conn) == "postgresql":
        sql = "SELECT proname FROM pg_proc WHERE pronamespace = current_schema()::regnamespace"
    else:
        sql = "SELECT routine_name FROM information_schema.routines WHERE routine_schema = DATABASE()"
    return set(conn.execute(sa.text(sql)).scalars())


def _drop_sql(kind: str, name: str) -> str:
    return f"DROP {kind.upper()} IF EXISTS {name}"


def _execute_script(conn, text: str) -> None:
    # The raw DB-API cursor, so '%' in a function body is not taken for a parameter. Its
    # errors are wrapped like SQLAlchemy's own, so callers and the CLI see one kind of error.
    import sqlalchemy as sa

    dbapi = conn.connection.dbapi_connection
    try:
        with dbapi.cursor() as cur:
            cur.execute(text)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise sa.exc.DBAPIError.instance(text[:200], None, exc, conn.dialect.loaded_dbapi.Error) from exc


def text_at(dialect: str, name: str, revision: str) -> str:
    """The definition of `name` as revision `revision` installs it. A later revision that
    changes an object in place (views; a changed function is a new _vN instead) keeps the text
    it replaced in sql/<dialect>/previous/<that revision>/<name>.sql: the first such copy
    after `revision` is the text `revision` knew; without one the current file is."""
    previous = SQL_DIR / dialect / "previous"
    later = sorted(p.name for p in previous.iterdir() if p.is_dir() and p.name > revision) if previous.is_dir() else []
    for rev in later:
        path = previous / rev / f"{name}.sql"
        if path.is_file():
            return path.read_text()
    return object_file(dialect, name).read_text()


def _input_signature(text: str) -> str:
    """PostgreSQL: the argument types that identify the function a file defines, as DROP
    FUNCTION takes them (IN, INOUT and VARIADIC parameters; OUT and TABLE columns do not count)."""
    import pglast
    from pglast.stream import RawStream

    stmt = pglast.parse_sql(text)[0].stmt
    return ", ".join(RawStream()(p.argType) for p in stmt.parameters or ()
                     if str(getattr(p.mode, "value", p.mode)) in ("i", "b", "v", "d"))


def install_one(conn, name: str, revision: str, text: str | None = None, redefine: bool = False) -> None:
    """Install `text` (default: the current file) as `name` and record it for `revision`.
    `redefine` (a downgrade putting back an older text): on PostgreSQL, a function that
    CREATE OR REPLACE cannot replace (another result type, as claim_tis_v1 before revision 0003,
    or renamed parameters: SQLSTATE 42P13) is dropped, by its argument types, and created."""
    import sqlalchemy as sa

    dialect = dialect_of(conn)
    text = object_file(dialect, name).read_text() if text is None else text
    kind = object_kind(dialect, name, text)
    if dialect == "mysql" and kind != "view":
        conn.execute(sa.text(_drop_sql(kind, name)))  # MySQL has no CREATE OR REPLACE FUNCTION
    if kind == "view" and dialect == "mysql":
        # MySQL/MariaDB views are bound late: CREATE OR REPLACE works whatever changed and views
        # built on this one survive. (No savepoint here: DDL commits implicitly on MySQL.)
        _execute_script(conn, re.sub(r"^(\s*(?:--[^\n]*\n\s*)*)CREATE\s+VIEW", r"\1CREATE OR REPLACE VIEW", text,
                                     count=1, flags=re.I))
    elif kind == "view":
        # Replace in place so views built on this one survive; when the columns changed
        # incompatibly, drop it with its dependents (repair() reinstalls those).
        replace = re.sub(r"^(\s*(?:--[^\n]*\n\s*)*)CREATE\s+VIEW", r"\1CREATE OR REPLACE VIEW", text, count=1, flags=re.I)
        try:
            with conn.begin_nested():
                _execute_script(conn, replace)
        except sa.exc.DBAPIError:
            conn.execute(sa.text(_drop_sql(kind, name) + " CASCADE"))
            _execute_script(conn, text)
    elif redefine and dialect == "postgresql":
        try:
            with conn.begin_nested():
                _execute_script(conn, text)
        except sa.exc.DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", getattr(exc.orig, "pgcode", None)) != "42P13":  # invalid_function_definition
                raise
            conn.execute(sa.text(f"DROP FUNCTION {name}({_input_signature(text)})"))
            _execute_script(conn, text)
    else:
        try:
            _execute_script(conn, text)
        except Exception as exc:
            if dialect == "mysql" and getattr(exc, "args", (None,))[0] == 1418:
                # MySQL with binary logging refuses functions that modify data (finish_ti_v1,
                # heartbeat_v1, release_ti_v1) unless the DBA trusts function creators.
                raise EngineError(f"MySQL refused to create {name} (binary logging is on); set "
                                  "log_bin_trust_function_creators = ON on the server and run `engine db upgrade` "
                                  "again") from None
            raise
    conn.execute(sa.text("DELETE FROM procedure_version WHERE name = :n"), {"n": name})
    conn.execute(
        sa.text("INSERT INTO procedure_version (name, kind, file_checksum, db_checksum, revision) "
                "VALUES (:n, :k, :f, :d, :r)"),
        {"n": name, "k": kind, "f": file_checksum(text), "d": db_checksum(conn, dialect, name, kind), "r": revision},
    )


def install(op, names: list[str], revision: str) -> None:
    conn = op.get_bind()
    manifest.refuse_changed(dialect_of(conn), names)
    for name in names:
        install_one(conn, name, revision, text_at(dialect_of(conn), name, revision))


def restore(op, names: list[str], revision: str, down_revision: str) -> None:
    """Downgrade of `revision` for objects it changed in place: reinstall the text each had
    before (sql/<dialect>/previous/<revision>/<name>.sql), recorded as `down_revision`'s."""
    import sqlalchemy as sa

    conn = op.get_bind()
    dialect = dialect_of(conn)
    for name in names:
        install_one(conn, name, down_revision, text_at(dialect, name, down_revision), redefine=True)
    # Replacing a view whose columns shrank drops its dependents (PostgreSQL, CASCADE): put
    # back every other recorded object that went missing, from its file (unchanged by revision).
    recorded = conn.execute(sa.text("SELECT name, kind, revision FROM procedure_version")).all()
    held = db_checksums(conn, dialect)
    for r in recorded:
        if r.name not in names and (r.name, r.kind == "view") not in held:
            install_one(conn, r.name, r.revision, text_at(dialect, r.name, down_revision))


def remove(op, names: list[str]) -> None:
    import sqlalchemy as sa

    conn = op.get_bind()
    dialect = dialect_of(conn)
    for name in reversed(names):
        kind = object_kind(dialect, name, object_file(dialect, name).read_text())
        conn.execute(sa.text(_drop_sql(kind, name)))
        conn.execute(sa.text("DELETE FROM procedure_version WHERE name = :n"), {"n": name})


def expected_objects(dialect: str) -> list[str]:
    """What the current sql/ files describe: every version of each function (an old version
    stays installed beside the new one, so schedulers of the previous release keep working
    during a rolling upgrade) and every view."""
    return sorted(path.stem for path in (SQL_DIR / dialect).glob("*.sql"))


@dataclass(frozen=True)
class Finding:
    name: str
    status: str  # ok, missing, drifted, outdated, not-installed, extra-overload, unexpected,
                 # changed-released, deleted-released (name: the file's path)
    detail: str


def check(conn) -> list[Finding]:
    import sqlalchemy as sa

    dialect = dialect_of(conn)
    recorded = {r.name: r for r in conn.execute(sa.text(
        "SELECT name, kind, file_checksum, db_checksum, revision FROM procedure_version"))}
    findings = []
    held = db_checksums(conn, dialect)
    for name in expected_objects(dialect):
        text = object_file(dialect, name).read_text()
        kind = object_kind(dialect, name, text)
        rec = recorded.get(name)
        now = held.get((name, kind == "view"))
        if rec is None:
            findings.append(Finding(name, "not-installed", "no migration installed it; run `engine db upgrade`"))
        elif now is None:
            findings.append(Finding(name, "missing", f"recorded by revision {rec.revision} but absent from the database"))
        elif now != rec.db_checksum:
            findings.append(Finding(name, "drifted", "the definition in the database was changed by hand"))
        elif rec.file_checksum != file_checksum(text):
            findings.append(Finding(name, "outdated", f"sql/{dialect}/{name}.sql changed since it was installed"))
        else:
            findings.append(Finding(name, "ok", f"{kind}, revision {rec.revision}"))
    # Released files whose text changed (engine/manifest.py): released versions are frozen.
    for key, status, detail in manifest.problems():
        if status != "unreleased" and (key.startswith(f"sql/{dialect}/") or key.startswith("migrations/")):
            findings.append(Finding(key, status, detail))
    # Routines of the schema beside the recorded ones: another overload of an engine function
    # (PostgreSQL: same name, other arguments), or a routine no migration installed.
    for name, count in routine_counts(conn).items():
        if name not in recorded:
            findings.append(Finding(name, "unexpected", "no migration installed it; drop it, or ship it in a revision"))
        elif count > 1:
            findings.append(Finding(name, "extra-overload", f"{count} definitions of {name} in the schema (a hand-made "
                                    "overload); drop the one(s) with other arguments"))
    return findings


def routine_counts(conn) -> dict[str, int]:
    """Every stored function and procedure of the current schema (database) with how many
    definitions share its name (PostgreSQL overloads; always 1 on MySQL)."""
    import sqlalchemy as sa

    if dialect_of(conn) == "postgresql":
        sql = ("SELECT proname, count(*) FROM pg_proc WHERE pronamespace = current_schema()::regnamespace "
               "GROUP BY proname")
    else:
        sql = ("SELECT routine_name, count(*) FROM information_schema.routines WHERE routine_schema = DATABASE() "
               "GROUP BY routine_name")
    return {name: int(n) for name, n in conn.execute(sa.text(sql))}


def repair(conn) -> list[str]:
    """Reinstall every recorded object :func:`check` does not report ok (drifted, missing,
    outdated); returns their names. An object no migration installed stays not-installed: a
    new object needs a revision. Repeats while something is left to do, since replacing a
    view may drop its dependents."""
    fixed: list[str] = []
    for _ in range(3):
        todo = [f.name for f in check(conn) if f.status in ("missing", "drifted", "outdated")]
        if not todo:
            break
        manifest.refuse_changed(dialect_of(conn), todo)
        for name in todo:
            install_one(conn, name, "repair")
            if name not in fixed:
                fixed.append(name)
    return fixed
