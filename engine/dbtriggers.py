"""The engine's database triggers (not the deferral triggers of engine/triggers.py), checked and
repaired like its procedures.

Triggers carry part of the engine's correctness: the usage counters (revision 0020) are kept by
triggers on `task_instance` and `pool`, skip entries by `stamp_scheduled*` (revisions 0026,
0030), and MySQL's `queue_tis_v17` appends its own usage only because the trigger
`usage_ti_update` (revision 0033) passes over the rows it writes. A trigger changed, disabled or
dropped by hand breaks them silently, so `engine db check` compares every trigger of the schema
with `sql/<dialect>/db_triggers.txt`, the triggers a database migrated to head has, as the database
itself describes them; `engine db upgrade` makes a missing or changed one again from there.

The file is written from a freshly migrated database (`python -m engine.dbtriggers write URL`,
once per dialect) whenever a revision makes or changes a trigger; tests/test_migrations.py
fails until it matches. Each line is `name<TAB>definition`:
- PostgreSQL: `pg_get_triggerdef` (a `CREATE TRIGGER` statement), with ` DISABLED` appended when
  the trigger is not enabled and the schema's name left out;
- MySQL/MariaDB: `CREATE TRIGGER name timing event ON table FOR EACH ROW body` from
  information_schema.TRIGGERS, whitespace folded, preceded by its place among the triggers of the
  same table, timing and event (`#2`: fires second), which MySQL keeps apart from the body.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from engine.paths import SQL_DIR
from engine.procedures import Finding, dialect_of


def expected_file(dialect: str) -> Path:
    return SQL_DIR / dialect / "db_triggers.txt"


def expected(dialect: str) -> dict[str, str]:
    """{name: definition} of the triggers a database at head has."""
    found = {}
    for line in expected_file(dialect).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, definition = line.split("\t", 1)
            found[name] = definition
    return found


def actual(conn) -> dict[str, str]:
    """{name: definition} of the triggers on the tables of the engine's schema (database)."""
    import sqlalchemy as sa

    if dialect_of(conn) == "postgresql":
        schema = conn.execute(sa.text("SELECT current_schema()")).scalar_one()
        rows = conn.execute(sa.text(
            "SELECT t.tgname, pg_get_triggerdef(t.oid), t.tgenabled FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal"))
        qualified = re.compile(rf'(?<![\w"])(?:{re.escape(schema)}|"{re.escape(schema)}")\.')
        return {name: qualified.sub("", definition) + ("" if enabled == "O" else " DISABLED")
                for name, definition, enabled in rows}
    rows = conn.execute(sa.text(
        "SELECT trigger_name, action_timing, event_manipulation, event_object_table, action_order, "
        "action_statement FROM information_schema.triggers WHERE trigger_schema = DATABASE()"))
    return {r[0]: f"#{r[4]} CREATE TRIGGER {r[0]} {r[1]} {r[2]} ON {r[3]} FOR EACH ROW {' '.join(r[5].split())}"
            for r in rows}


def check(conn) -> list[Finding]:
    """One finding per trigger: ok, missing, drifted (its definition differs from the file) or
    unexpected (a trigger in the engine's schema that no migration makes; never dropped here)."""
    dialect = dialect_of(conn)
    want, have = expected(dialect), actual(conn)
    where = f"sql/{dialect}/db_triggers.txt"
    findings = []
    for name, definition in want.items():
        if name not in have:
            findings.append(Finding(name, "missing", f"trigger: absent from the database ({where} has it)"))
        elif have[name] != definition:
            findings.append(Finding(name, "drifted", f"trigger: its definition differs from {where} "
                                                     "(changed or disabled by hand)"))
        else:
            findings.append(Finding(name, "ok", "trigger"))
    for name in sorted(set(have) - set(want)):
        findings.append(Finding(name, "unexpected", "trigger in the engine's schema that no migration makes; drop "
                                                    "it, or ship it in a revision"))
    return findings


def repair(conn) -> list[str]:
    """Make every missing or drifted trigger again as the file defines it; returns their names.
    PostgreSQL: in the caller's transaction (DDL is transactional there). MySQL keeps no order
    apart from creation: every trigger of the same table, timing and event as a repaired one is
    made again too, in the file's order, under LOCK TABLES ... WRITE of their tables. A trigger that
    was missing or wrong may already have let the usage counters drift: `engine db check` says so
    and `--repair` appends the corrections."""
    bad = [f.name for f in check(conn) if f.status in ("missing", "drifted")]
    if not bad:
        return []
    want = expected(dialect_of(conn))
    if dialect_of(conn) == "postgresql":
        for name in bad:
            table = re.search(r" ON (\S+) ", want[name]).group(1)
            # (exec_driver_sql: a body's text goes to the server as it is, colons and all)
            conn.exec_driver_sql(f'DROP TRIGGER IF EXISTS "{name}" ON {table}')
            definition = want[name]
            conn.exec_driver_sql(definition.removesuffix(" DISABLED"))
            if definition.endswith(" DISABLED"):
                conn.exec_driver_sql(f'ALTER TABLE {table} DISABLE TRIGGER "{name}"')
        return bad
    groups = {_group(want[name]) for name in bad}
    todo = sorted((int(d.split(" ", 1)[0][1:]), name, d) for name, d in want.items() if _group(d) in groups)
    # Each DDL statement commits on its own: the tables stay write-locked from the first DROP to
    # the last CREATE, so no row is written while a trigger is missing (its usage would be lost).
    tables = sorted({table for _, _, table in groups})
    conn.exec_driver_sql("LOCK TABLES " + ", ".join(f"`{t}` WRITE" for t in tables))
    try:
        for _, name, _ in todo:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS `{name}`")
        for _, _, definition in todo:  # in order: each new trigger fires after those made before it
            conn.exec_driver_sql(definition.split(" ", 1)[1])
    finally:
        conn.exec_driver_sql("UNLOCK TABLES")
    return bad


def _group(mysql_definition: str) -> tuple[str, str, str]:
    m = re.match(r"#\d+ CREATE TRIGGER \S+ (\w+) (\w+) ON (\S+) ", mysql_definition)
    return m.group(1), m.group(2), m.group(3)


HEADER = """# The triggers of a database migrated to head, as {dialect} describes them (engine/dbtriggers.py).
# Written by `python -m engine.dbtriggers write URL` from a freshly migrated database; `engine db
# check` reports a trigger that differs, `engine db upgrade` makes it again from here.
"""


def write(conn) -> Path:
    dialect = dialect_of(conn)
    path = expected_file(dialect)
    lines = [f"{name}\t{definition}" for name, definition in sorted(actual(conn).items())]
    path.write_text(HEADER.format(dialect=dialect) + "\n".join(lines) + "\n")
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "write":
        print("usage: python -m engine.dbtriggers write DATABASE_URL  (a new, empty database: it is migrated to head)",
              file=sys.stderr)
        return 2
    from engine import db, migrate

    eng = db.make_engine(argv[1])
    # The last revision by name, not "head": at head, upgrade makes drifted triggers again from
    # this very file, which would undo a revision that changes one.
    migrate.upgrade(eng, migrate.revisions()[-1])
    with eng.begin() as conn:
        print(write(conn))
    eng.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
