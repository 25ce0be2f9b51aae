"""`engine tasks test` and `engine dags test`: run a task, or a whole DAG run, from one process
against the database, printing each task's log; no scheduler or worker service needed.

- test_task: one task, once, in the foreground, as a worker would start it (supervisor,
  environment, DAG folder), its log streamed to stdout; no dependency check and nothing
  written to the database (Airflow's `tasks test`).
- test_dag: a manual run (trigger_dag_v3, run id test__<time>) driven to its end by a
  scheduler pass and a worker pass in this process (the same stored functions as the
  services), printing each TI's log when its try ends. The passes serve every due run of the
  database, as `engine demo` does: use it on a development database.
"""
from __future__ import annotations

import os
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import click

from engine import db
from engine.errors import EngineError

DONE = ("success", "failed", "skipped", "upstream_failed", "removed")


def _task_row(eng, dag_id: str, task_id: str):
    with db.connect(eng) as conn:
        row = db.run(conn, "task_for_test", dag_id=dag_id, task_id=task_id).first()
        if row is None:
            if db.run(conn, "dag_exists", dag_id=dag_id).first() is None:
                raise EngineError(f"unknown DAG {dag_id!r}; see `engine dags list`")
            raise EngineError(f"DAG {dag_id!r} has no task {task_id!r}; see the DAG file or `engine dags sync`")
    return dict(row._mapping)


def stream(path: Path, offset: int) -> int:
    """Print what path gained since offset; return the new offset."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    if data:
        click.echo(data.decode(errors="replace"), nl=False)
    return offset + len(data)


def test_task(eng, cfg, dag_id: str, task_id: str, map_index: int | None) -> int:
    from engine.runner import DEFER_EXIT_CODE
    from engine.worker import engine_secrets, start_child, task_base_env

    task = _task_row(eng, dag_id, task_id)
    expand = task.get("expand") or {}
    if expand and map_index is None:
        raise EngineError(f"task {dag_id}.{task_id} is mapped ({task['map_count']} instances); pass --map-index N")
    if map_index is not None and not expand:
        raise EngineError(f"task {dag_id}.{task_id} is not mapped; drop --map-index")
    if expand and not 0 <= map_index < (task["map_count"] or 0):
        raise EngineError(f"task {dag_id}.{task_id} has map indexes 0 to {(task['map_count'] or 1) - 1}; "
                          f"got --map-index {map_index}")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
    with tempfile.TemporaryDirectory(prefix="engine-test-") as tmp:
        log_path = Path(tmp) / "task.log"
        row = {**task, "dags_folder": str(cfg.dags_path), "ti_id": 0, "run_id": f"test__{stamp}", "try_number": 1, "conf": {},
               "map_index": -1 if map_index is None else map_index, "log_path": str(log_path),
               "map_args": {k: v[map_index] for k, v in expand.items()} if expand else None}
        defer_file = str(Path(tmp) / "defer.json") if row["kind"] == "python" else None
        base = task_base_env(secrets=engine_secrets(cfg, eng), passthrough=bool(getattr(cfg, "task_env_passthrough", False)))
        proc = start_child(row, defer_file, base)
        offset, deadline = 0, (time.monotonic() + row["execution_timeout"]) if row.get("execution_timeout") else None
        try:
            while proc.poll() is None:
                offset = stream(log_path, offset)
                if deadline is not None and time.monotonic() > deadline:
                    click.echo(f"engine tasks test: execution_timeout ({row['execution_timeout']:g} s) exceeded; "
                               "stopping the task", err=True)
                    proc.terminate()
                    deadline = None
                time.sleep(0.1)
        finally:
            proc.lifeline.close()
            proc.wait()
        stream(log_path, offset)
    code = proc.returncode
    if code == DEFER_EXIT_CODE:
        click.echo("engine tasks test: the task deferred; a test runs no triggers (use `engine dags test`)", err=True)
    else:
        click.echo(f"engine tasks test: {dag_id}.{task_id} exited with {code}", err=True)
    return code


def test_dag(eng, cfg, dag_id: str, logical_date, timeout: float) -> int:
    from engine.scheduler import Scheduler
    from engine.worker import Worker

    with db.connect(eng) as conn:
        dag = db.run(conn, "dag_exists", dag_id=dag_id).first()
    if dag is None:
        raise EngineError(f"unknown DAG {dag_id!r}; see `engine dags list`")
    if dag.is_paused:
        raise EngineError(f"DAG {dag_id!r} is paused, so its runs do not start; `engine dags unpause {dag_id}` first")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
    with db.connect(eng) as conn:
        run = db.run(conn, "trigger_run", dag_id=dag_id, run_id=f"test__{stamp}", conf="{}",
                     logical_date=logical_date, now=None).one()
    click.echo(f"engine dags test: run {run.run_id} of {dag_id}")
    scheduler, worker = Scheduler(eng, cfg), Worker(eng, cfg)
    worker.start()
    printed: set = set()
    started = time.monotonic()
    state = "queued"
    try:
        while time.monotonic() - started < timeout:
            scheduler.run_once()
            worker.run_once()
            with db.connect(eng) as conn:
                tis = db.run(conn, "tis_list", dag_id=dag_id, run_id=run.run_id, task_id=None, map_index=None,
                             state=None).all()
                state = db.run(conn, "run_get", dag_id=dag_id, run_id=run.run_id).one().state
                dag = db.run(conn, "dag_exists", dag_id=dag_id).first()
            for ti in tis:
                key = (ti.task_id, ti.map_index, ti.try_number, ti.state)
                if ti.state in DONE + ("up_for_retry",) and key not in printed:
                    printed.add(key)
                    where = ti.task_id + (f"[{ti.map_index}]" if ti.map_index >= 0 else "")
                    click.echo(f"== {where} try {ti.try_number}: {ti.state}"
                               + (f" ({ti.reason})" if ti.reason else ""))
                    if ti.log_path and os.path.exists(ti.log_path):
                        stream(Path(ti.log_path), 0)
            if state in ("success", "failed"):
                break
            if dag is not None and dag.is_paused:   # (paused meanwhile: nothing of the run would start)
                raise EngineError(f"DAG {dag_id!r} was paused during the test; its run {run.run_id} stays {state} "
                                  f"until `engine dags unpause {dag_id}`")
            time.sleep(0.1)
    finally:
        worker.stop()
        scheduler.stop()
    click.echo(f"engine dags test: run {run.run_id} of {dag_id}: {state} in {time.monotonic() - started:.1f}s")
    return 0 if state == "success" else 1
