"""`engine dags sync PATH`: parse DAG files and write their definitions in one transaction.

All or nothing: a broken file, a cycle, an unknown pool or a task wider than its pool aborts
the sync with one line, and what was stored before stays as it was.
"""
from __future__ import annotations

import json
from pathlib import Path

from engine import db
from engine.dagbag import load_dags
from engine.errors import EngineError


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
        "expand": json.dumps(t["expand"]) if t["expand"] is not None else None,
        "map_count": len(next(iter(t["expand"].values()))) if t["expand"] else None,
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


def _check_owners(conn, dags: list[dict]) -> None:
    """A DAG id belongs to the file that defines it: another file may not take it over silently."""
    if not dags:
        return
    taken = db.run(conn, "dag_taken_from", dag_ids=[d["dag_id"] for d in dags],
                   filelocs=[d["fileloc"] for d in dags]).first()
    if taken:
        raise EngineError(f"dag '{taken.dag_id}' is defined by {taken.stored_in}, and {taken.synced_from} defines it "
                          "too; rename one of them, or pass --force to move the DAG to the new file")


def sync(eng, path: str | Path, dags: list[dict] | None = None, force: bool = False,
         paused_at_creation: bool = False) -> dict:
    """Write every DAG found under ``path`` (or the already loaded ``dags`` of it);
    return {"synced": [...], "deactivated": [...]}. A DAG id stored from another file is
    refused unless ``force``. A DAG new to the database starts paused when its
    is_paused_upon_creation says so, or (not set) when ``paused_at_creation`` (the setting
    dags_are_paused_at_creation, which `engine dags sync` passes); an existing DAG keeps its state."""
    root = Path(path).resolve()
    if dags is None:
        dags = load_dags(root)  # raises EngineError before anything is written
    with db.connect(eng) as conn:
        if not force:
            _check_owners(conn, dags)
        _check_targets(conn, dags)
        for d in dags:
            db.run(conn, "upsert_dag", dag_id=d["dag_id"], fileloc=d["fileloc"], description=d["description"],
                   schedule=d["schedule"], start_date=d["start_date"], catchup=d["catchup"],
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
        prefix = str(root).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "/%"
        gone = db.run(conn, "deactivate_dags", path=str(root), prefix=prefix,
                      dag_ids=[d["dag_id"] for d in dags]).scalars().all()
    return {"synced": [d["dag_id"] for d in dags], "deactivated": sorted(gone)}
