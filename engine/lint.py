"""`engine sql lint [PATH]`: check the SQL files without a database.

PostgreSQL: every file parses with pglast (named statements with their `:name` parameters
replaced), and every PL/pgSQL function's BODY parses too, statement by statement, with pglast's
PL/pgSQL parser (the outer CREATE FUNCTION parses whatever the body holds). MySQL/MariaDB: no
parser is available offline; each object file must define (CREATE FUNCTION, PROCEDURE or VIEW)
the object it is named after, and its BEGIN/END blocks must balance. With a MySQL/MariaDB
server (`--server`, or a configured MySQL database URL), the server itself parses them: in a
scratch database migrated to head, each object file is created again from its text (routine
bodies parse; views also resolve their tables and columns) and each named statement is
PREPAREd (parsed and resolved, not run); the scratch database is dropped afterwards.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import os
import secrets

import sqlalchemy as sa

from engine import db, procedures


@dataclass(frozen=True)
class Problem:
    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, max(0, offset)) + 1


def _near(text: str, message: str, start: int = 0) -> int:
    """Line of the token a parser error names ('... at or near "x"'), searched from start."""
    m = re.search(r'at or near "(.*)"', message)
    if m:
        found = text.find(m.group(1), start)
        if found >= 0:
            return _line_of(text, found)
    return _line_of(text, start)


def lint_postgresql_file(path: Path) -> list[Problem]:
    import pglast
    from pglast import parser

    text = path.read_text()
    sql = re.sub(r"(?<!:):\w+", "NULL", text) if path.parent.name == "queries" else text
    try:
        statements = pglast.parse_sql(sql)
    except parser.ParseError as exc:
        location = getattr(exc, "location", None)
        line = _line_of(sql, location) if isinstance(location, int) else _near(sql, str(exc))
        return [Problem(path, line, f"does not parse: {exc}")]
    problems = []
    for raw in statements:
        stmt = raw.stmt
        if type(stmt).__name__ != "CreateFunctionStmt":
            continue
        language = next((o.arg.sval for o in (stmt.options or ()) if o.defname == "language"), "sql")
        if language.lower() != "plpgsql":
            continue
        start = raw.stmt_location or 0
        end = start + (raw.stmt_len or len(sql) - start)
        try:
            parser.parse_plpgsql_json(sql[start:end])
        except parser.ParseError as exc:
            body = sql.find("$$", start)  # errors are in the body: search from there
            problems.append(Problem(path, _near(sql, str(exc), body if body >= 0 else start),
                                    f"PL/pgSQL body of {stmt.funcname[-1].sval}: {exc}"))
    return problems


def _blank(m: re.Match) -> str:
    """The match as spaces, newlines kept: offsets and line numbers stay those of the file."""
    return re.sub(r"[^\n]", " ", m.group(0))


def lint_mysql_file(path: Path) -> list[Problem]:
    text = path.read_text()
    if path.parent.name != "queries":
        try:
            procedures.object_kind("mysql", path.stem, text)
        except ValueError as exc:
            return [Problem(path, 1, str(exc))]
    code = re.sub(r"--[^\n]*|'(?:[^'\\]|\\.)*'", _blank, text)
    # BEGIN ... END blocks and CASE ... END (CASE ... END CASE) must balance; END IF, END LOOP,
    # END WHILE and END REPEAT close statements that do not open with BEGIN or CASE.
    code = re.sub(r"\bEND\s+(?:IF|LOOP|WHILE|REPEAT)\b", _blank, code, flags=re.I)
    code = re.sub(r"\bEND(\s+)CASE\b", lambda m: "END" + _blank(m)[3:], code, flags=re.I)
    depth = 0
    for m in re.finditer(r"\b(BEGIN|CASE|END)\b", code, re.I):
        depth += -1 if m.group(1).upper() == "END" else 1
        if depth < 0:
            return [Problem(path, _line_of(code, m.start()), "END without BEGIN or CASE")]
    if depth:
        return [Problem(path, _line_of(code, len(code)), f"{depth} BEGIN or CASE block(s) not closed by END")]
    return []


def lint(root: Path, mysql_url: str | None = None) -> tuple[list[Path], list[Problem]]:
    """Every .sql file under root (a sql/ folder, a dialect folder or one file); the dialect
    of a file is the name of the folder under which it lies (postgresql or mysql). With
    mysql_url, the MySQL files that pass the offline checks are also parsed by that server."""
    files = [root] if root.is_file() else sorted(root.rglob("*.sql"))
    problems: list[Problem] = []
    for path in files:
        dialect = "mysql" if "mysql" in path.parts else "postgresql"
        problems += lint_mysql_file(path) if dialect == "mysql" else lint_postgresql_file(path)
    if mysql_url:
        bad = {p.path for p in problems}
        # previous/ texts belong to older revisions' schemas: the offline checks only.
        problems += lint_mysql_on_server([f for f in files if f not in bad and "previous" not in f.parts], mysql_url)
    return files, problems


_MYSQL_LINE = re.compile(r"at line (\d+)")


def lint_mysql_on_server(files: list[Path], url: str) -> list[Problem]:
    """The MySQL files of `files`, parsed by the server of `url` in a scratch database."""
    from engine import migrate
    mine = [f for f in files if "mysql" in f.parts]
    if not mine:
        return []
    scratch = f"engine_lint_{os.getpid()}_{secrets.token_hex(4)}"
    base = sa.engine.make_url(url)
    admin = db.make_engine(base._replace(database=None).render_as_string(hide_password=False))
    eng = db.make_engine(base.set(database=scratch).render_as_string(hide_password=False))
    problems: list[Problem] = []
    try:
        db.ensure_database(eng)
        migrate.upgrade(eng)
        for path in mine:
            problems += _on_server(eng, path)
    finally:
        eng.dispose()
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{scratch}`")
        admin.dispose()
    return problems


def _on_server(eng, path: Path) -> list[Problem]:
    text = path.read_text()
    with eng.connect() as conn:
        raw = conn.connection.dbapi_connection
        try:
            with raw.cursor() as cur:
                if path.parent.name == "queries":
                    for part in db._STATEMENT_END.split(text):
                        if db._is_sql(part):
                            cur.execute("PREPARE engine_lint FROM %s", (re.sub(r"(?<!:):\w+", "?", part),))
                            cur.execute("DEALLOCATE PREPARE engine_lint")
                else:
                    kind = procedures.object_kind("mysql", path.stem, text)
                    if kind == "view":  # replaced in place: a view that does not parse leaves the old one
                        text = re.sub(r"^(\s*(?:--[^\n]*\n\s*)*)CREATE\s+VIEW", r"\1CREATE OR REPLACE VIEW", text,
                                      count=1, flags=re.I)
                    else:
                        cur.execute(f"DROP {kind.upper()} IF EXISTS `{path.stem}`")
                    cur.execute(text.replace("%", "%%"))
        except conn.dialect.loaded_dbapi.Error as exc:
            message = " ".join(str(exc.args[1] if len(exc.args) > 1 else exc).split())
            m = _MYSQL_LINE.search(message)
            return [Problem(path, int(m.group(1)) if m else 1, f"the server refused it: {message}")]
        except ValueError as exc:
            return [Problem(path, 1, str(exc))]
        finally:
            raw.rollback()
    return []
