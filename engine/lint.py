"""`engine sql lint [PATH]`: check the SQL files without a database.

PostgreSQL: every file parses with pglast (named statements with their `:name` parameters
replaced), and every PL/pgSQL function's BODY parses too, statement by statement, with pglast's
PL/pgSQL parser (the outer CREATE FUNCTION parses whatever the body holds). MySQL/MariaDB: no
parser is available offline; each object file must define (CREATE FUNCTION, PROCEDURE or VIEW)
the object it is named after, and its BEGIN/END blocks must balance. What is not checked
there: the statements themselves (docs/dialects.md says how a DBA checks them on a server).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from engine import procedures


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


def lint(root: Path) -> tuple[list[Path], list[Problem]]:
    """Every .sql file under root (a sql/ folder, a dialect folder or one file); the dialect
    of a file is the name of the folder under which it lies (postgresql or mysql)."""
    files = [root] if root.is_file() else sorted(root.rglob("*.sql"))
    problems: list[Problem] = []
    for path in files:
        dialect = "mysql" if "mysql" in path.parts else "postgresql"
        problems += lint_mysql_file(path) if dialect == "mysql" else lint_postgresql_file(path)
    return files, problems
