"""Released files are immutable: the manifest `sql/released.sha256` holds the checksum of every
versioned object file (`sql/<dialect>/*_vN.sql`), every kept previous text
(`sql/<dialect>/previous/<revision>/*.sql`) and every migration revision as released.

A released file never changes: a change to a procedure is a new `_vN` file and a new revision.
`engine db check` reports a file whose text differs from its manifest entry
(`changed-released`), and tests/test_migrations.py fails on one, or on a new file the manifest
does not list yet. `python -m engine.manifest add` appends the new files (it never rewrites an
entry); run it when a new version or revision is ready to land.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from engine.errors import EngineError
from engine.paths import MIGRATIONS_DIR, SQL_DIR

MANIFEST = SQL_DIR / "released.sha256"


def tracked() -> dict[str, Path]:
    """{key: path} of every file the manifest must list; keys are stable across a checkout and
    an installed wheel ('sql/postgresql/queue_tis_v1.sql', 'migrations/versions/0001_initial.py')."""
    found = {}
    for dialect in ("postgresql", "mysql"):
        for path in (SQL_DIR / dialect).glob("*_v[0-9]*.sql"):
            found[f"sql/{dialect}/{path.name}"] = path
        for path in (SQL_DIR / dialect / "previous").glob("*/*.sql"):
            found[f"sql/{dialect}/previous/{path.parent.name}/{path.name}"] = path
    for path in (MIGRATIONS_DIR / "versions").glob("[0-9]*.py"):
        found[f"migrations/versions/{path.name}"] = path
    return dict(sorted(found.items()))


def checksum(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def released() -> dict[str, str]:
    """{key: sha256} as the manifest records them."""
    if not MANIFEST.is_file():
        return {}
    entries = {}
    for line in MANIFEST.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, key = line.split(None, 1)
            entries[key.strip()] = digest
    return entries


def problems() -> list[tuple[str, str, str]]:
    """(key, status, detail) for each file that is not as released: 'changed-released' (its
    text differs from the manifest's), 'unreleased' (the manifest does not list it yet),
    'deleted-released' (listed, but gone)."""
    files, entries = tracked(), released()
    found = []
    for key, path in files.items():
        if key not in entries:
            found.append((key, "unreleased", "not in sql/released.sha256 yet; run `python -m engine.manifest add` "
                                              "when it is ready to land"))
        elif checksum(path) != entries[key]:
            found.append((key, "changed-released", "released with another text; released versions are frozen: "
                                                  "restore it and ship the change as a new _vN and revision"))
    for key in entries.keys() - files.keys():
        found.append((key, "deleted-released", "released, but the file is gone; restore it"))
    return sorted(found)


def refuse_changed(dialect: str, names) -> None:
    """EngineError when one of the object files `names` of `dialect` differs from its released
    text: installing it would change a released version in the database too."""
    entries = released()
    for name in names:
        key = f"sql/{dialect}/{name}.sql"
        path = SQL_DIR / dialect / f"{name}.sql"
        if key in entries and path.is_file() and checksum(path) != entries[key]:
            raise EngineError(f"{key} differs from its released text; released versions are frozen: restore it "
                              f"(git checkout) and ship the change as a new _vN file and revision")


def add() -> list[str]:
    """Append every tracked file the manifest does not list; never rewrites an entry."""
    entries = released()
    new = [(key, path) for key, path in tracked().items() if key not in entries]
    if new:
        with MANIFEST.open("a") as out:
            if not entries:
                out.write("# sha256 of every released file; append only (python -m engine.manifest add)\n")
            for key, path in new:
                out.write(f"{checksum(path)}  {key}\n")
    return [key for key, _ in new]


def main(argv: list[str]) -> int:
    if argv == ["add"]:
        for key in add():
            print(f"added {key}")
        bad = [p for p in problems() if p[1] != "unreleased"]
    elif argv in ([], ["check"]):
        bad = problems()
    else:
        print("usage: python -m engine.manifest [check|add]", file=sys.stderr)
        return 2
    for key, status, detail in bad:
        print(f"{key}: {status}: {detail}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
