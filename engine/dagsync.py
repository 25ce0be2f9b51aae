"""`engine dags sync PATH`: parse DAG files and write their definitions in one transaction.

All or nothing: a broken file, a cycle, an unknown pool, a task wider than its pool or a file
outside the DAGs folder aborts the sync with one line, and what was stored before stays as it was.

`dag.fileloc` is the DAG file's path relative to the DAGs folder (setting dags_folder), so a
worker on another host, with the DAGs checked out elsewhere, finds the task code under its own
dags_folder (engine.paths.dag_file). Without a DAGs folder (the Python API's default, used by
`engine demo`) the absolute path is stored, as before revision 0012.
"""
from __future__ import annotations

import json
from pathlib import Path

from engine import db, timezones
from engine.dagbag import find_dag_files, load_dags
from engine.errors import EngineError
from engine.pools import lock_definitions


def _task_params(dag_id: str, t: dict) -> dict:
    return {
        "dag_id": dag_id, "task_id": t["task_id"], "kind": t["kind"],
        "bash_command": t["bash_command"], "env": json.dumps(t["env"]) if t["env"] is not None else None,
        "python_callable": t["python_callable"],
        "op_kwargs": json.dumps(t["op_kwargs"]) if t["op_kwargs"] is not None else None,
        "pool": t["pool"], "pool_slots": t["pool_slots"], "priority_weight": t["priority_weight"],
        "weight_rule": t["weight_rule"], "queue": t["queue"], "executor": t["executor"],
        "retries": t["retries"], "retry_delay": t["retry_delay"],
        "retry_exponential_backoff": t["retry_exponential_backoff"], "max_retry_delay": t["max_retry_delay"],
        "execution_timeout": t["execution_timeout"], "trigger_rule": t["trigger_rule"],
        "max_active_tis_per_dag": t["max_active_tis_per_dag"],
        "max_active_tis_per_dagrun": t["max_active_tis_per_dagrun"],
        "preemptible": bool(t.get("preemptible", False)),
        "expand": json.dumps(t["expand"]) if t["expand"] is not None else None,
        # mapped over an upstream's output: one TI (map_index -1) until schedule_tis_v3 expands it
        "map_count": len(next(iter(t["expand"].values()))) if t["expand"] and not t.get("map_upstream") else None,
        "map_upstream": t.get("map_upstream"),
        "inputs": json.dumps(t["inputs"]) if t.get("inputs") else None,
    }


def _check_targets(conn, dags: list[dict]) -> None:
    tasks = [(d["dag_id"], t) for d in dags for t in d["tasks"]]
    if not tasks:
        return
    bad = db.run(conn, "check_task_targets",
                 dag_ids=[d for d, _ in tasks], task_ids=[t["task_id"] for _, t in tasks],
                 pools=[t["pool"] for _, t in tasks], pool_slots=[t["pool_slots"] for _, t in tasks],
                 executors=[t["executor"] for _, t in tasks]).first()
    if bad is None:
        return
    where = f"task {bad.dag_id}.{bad.task_id}"
    if bad.unknown_pool:
        raise EngineError(f"{where}: unknown pool {bad.pool!r}; create it with `engine pools set {bad.pool} SLOTS`")
    if bad.unknown_executor:
        raise EngineError(f"{where}: unknown executor {bad.executor!r}; use 'default' or create it")
    raise EngineError(f"{where}: pool_slots={bad.pool_slots} is more than pool {bad.pool!r} has ({bad.slots}); "
                      f"lower pool_slots or `engine pools set {bad.pool} {bad.pool_slots}`")


def _check_owners(conn, dags: list[dict], absolute: dict[str, str]) -> None:
    """A DAG id belongs to the file that defines it: another file may not take it over silently.
    The same file stored by its absolute path (before revision 0012) is the same owner."""
    if not dags:
        return
    taken = db.run(conn, "dag_taken_from", dag_ids=[d["dag_id"] for d in dags],
                   filelocs=[d["fileloc"] for d in dags],
                   abs_filelocs=[absolute[d["dag_id"]] for d in dags]).first()
    if taken:
        raise EngineError(f"dag '{taken.dag_id}' is defined by {taken.stored_in}, and {taken.synced_from} defines it "
                          "too; rename one of them, or pass --force to move the DAG to the new file")


def _outside_fix(folder: Path) -> str:
    return (f"move it under {folder}, or set dags_folder (ENGINE_DAGS_FOLDER, engine.toml) to a folder that "
            "holds it; workers find task code under their own dags_folder")


def _folder_and_root(path: str | Path, dags_folder: str | Path) -> tuple[Path, Path]:
    """The DAGs folder and ``path``, resolved; EngineError (one line) for a folder that is not
    one, or a path outside it."""
    folder = Path(dags_folder).expanduser().resolve()
    if not folder.is_dir():
        raise EngineError(f"the DAGs folder {folder} (setting dags_folder) is not a folder; create it or set "
                          "dags_folder (ENGINE_DAGS_FOLDER) to the folder that holds the DAG files")
    root = Path(path).expanduser().resolve()
    if not root.is_relative_to(folder):
        raise EngineError(f"{root} is outside the DAGs folder {folder} (setting dags_folder); {_outside_fix(folder)}")
    return folder, root


def check_in_folder(path: str | Path, dags_folder: str | Path) -> tuple[Path, Path]:
    """The DAGs folder and ``path``, resolved. EngineError (one line) for a folder that is not one,
    or a path, or a DAG file under it (a symbolic link), outside it: called before any file is
    imported, so no code from outside the DAGs folder runs."""
    folder, root = _folder_and_root(path, dags_folder)
    for file in find_dag_files(root):
        if not file.resolve().is_relative_to(folder):  # a symbolic link out of the folder
            raise EngineError(f"DAG file {file} links to {file.resolve()}, outside the DAGs folder {folder}; "
                              f"{_outside_fix(folder)}")
    return folder, root


def relative_to_folder(dags: list[dict], path: str | Path, dags_folder: str | Path) -> str:
    """Rewrite each DAG's fileloc as its path relative to `dags_folder` (POSIX separators);
    return the synced path relative to it ('' for the folder itself). EngineError (one line)
    for a folder that is not one, or a path or file outside it (the files were walked before
    they were imported: check_in_folder; here each DAG's own file is checked)."""
    folder, root = _folder_and_root(path, dags_folder)
    for d in dags:
        file = Path(d["fileloc"]).resolve()
        if not file.is_relative_to(folder):  # a symbolic link out of the folder
            raise EngineError(f"DAG file {file} (dag '{d['dag_id']}') is outside the DAGs folder {folder}; "
                              f"{_outside_fix(folder)}")
        d["fileloc"] = file.relative_to(folder).as_posix()
    rel = root.relative_to(folder).as_posix()
    return "" if rel == "." else rel


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "/%"


def sync(eng, path: str | Path, dags: list[dict] | None = None, force: bool = False,
         paused_at_creation: bool = False, dags_folder: str | Path | None = None) -> dict:
    """Write every DAG found under ``path`` (or the already loaded ``dags`` of it);
    return {"synced": [...], "deactivated": [...]}. A DAG id stored from another file is
    refused unless ``force``. A DAG new to the database starts paused when its
    is_paused_upon_creation says so, or (not set) when ``paused_at_creation`` (the setting
    dags_are_paused_at_creation, which `engine dags sync` passes); an existing DAG keeps its state.
    With ``dags_folder`` (the CLI passes the setting) filelocs are stored relative to it."""
    root = Path(path).resolve()
    if dags is None:
        if dags_folder is not None:
            check_in_folder(root, dags_folder)  # before any file under it is imported
        dags = load_dags(root)  # raises EngineError before anything is written
    absolute = {d["dag_id"]: str(Path(d["fileloc"]).resolve()) for d in dags}
    rel_root = relative_to_folder(dags, root, dags_folder) if dags_folder is not None else None
    with db.connect(eng) as conn:
        lock_definitions(conn)  # one sync (or pools change) at a time: each check and its writes are one step
        if not force:
            _check_owners(conn, dags, absolute)
        _check_targets(conn, dags)
        timezones.store(conn, {d.get("timezone", "UTC") for d in dags})
        for d in dags:
            db.run(conn, "upsert_dag", dag_id=d["dag_id"], fileloc=d["fileloc"], description=d["description"],
                   schedule=d["schedule"],
                   timezone=d.get("timezone", "UTC"), start_date=d["start_date"], catchup=d["catchup"],
                   max_active_runs=d["max_active_runs"], max_active_tasks=d["max_active_tasks"],
                   is_paused=paused_at_creation if d.get("is_paused_upon_creation") is None
                   else d["is_paused_upon_creation"], tags=json.dumps(d["tags"]), serialized=json.dumps(d))
            for t in d["tasks"]:
                db.run(conn, "upsert_task", **_task_params(d["dag_id"], t))
            db.run(conn, "deactivate_tasks", dag_id=d["dag_id"], task_ids=[t["task_id"] for t in d["tasks"]])
            db.run(conn, "delete_dependencies", dag_id=d["dag_id"])
            edges = [(up, t["task_id"]) for t in d["tasks"] for up in t["upstream"]]
            if edges:
                db.run(conn, "insert_dependencies", dag_id=d["dag_id"],
                       ups=[u for u, _ in edges], downs=[w for _, w in edges])
        # DAGs stored from the synced path (relative filelocs, or absolute ones from before) that
        # its files no longer define
        rel_prefix = None if rel_root is None else ("%" if rel_root == "" else _like_prefix(rel_root))
        gone = db.run(conn, "deactivate_dags", path=str(root), prefix=_like_prefix(str(root)),
                      rel_path=rel_root, rel_prefix=rel_prefix,
                      dag_ids=[d["dag_id"] for d in dags]).scalars().all()
    return {"synced": [d["dag_id"] for d in dags], "deactivated": sorted(gone)}
