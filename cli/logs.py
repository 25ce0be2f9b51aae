"""`engine logs`: the log of one try of a TI; --follow while it runs. The database says where
each try's log is and which host wrote it (ti_overview, task_instance_history)."""
from __future__ import annotations

import socket
import time
from pathlib import Path

import click

from cli.common import Context, checked, handle_errors, pass_ctx
from cli.runs import require_run
from engine import db, validate
from engine.testing import stream  # prints what a log file gained
from engine.errors import EngineError

LIVE = ("queued", "running", "restarting", "deferred")


def _ti(conn, dag_id, run_id, task_id, map_index):
    return db.run(conn, "tis_list", dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index,
                  state=None).first()


@click.command()
@click.argument("dag_id", callback=checked("dag_id"))
@click.argument("run_id", callback=checked("run id", run_id=True))
@click.argument("task_id", callback=checked("task_id"))
@click.option("--map-index", type=click.IntRange(-1, validate.MAX_MAP_LENGTH), default=-1, show_default=True,
              help="the mapped instance")
@click.option("--try", "try_number", type=click.IntRange(1, 2**31 - 1), help="which try (default: the latest)")
@click.option("--follow", "-f", is_flag=True, help="keep printing while the try runs")
@click.option("--poll", type=click.FloatRange(0.05, 60), default=0.5, show_default=True, hidden=True)
@pass_ctx
@handle_errors
def logs(c: Context, dag_id, run_id, task_id, map_index, try_number, follow, poll):
    """Print the log of a try of TASK_ID in run RUN_ID of DAG_ID (the latest try by default)."""
    eng = c.engine()
    with db.connect(eng) as conn:
        require_run(conn, dag_id, run_id)
        ti = _ti(conn, dag_id, run_id, task_id, map_index)
        if ti is None:
            raise EngineError(f"run {run_id!r} of DAG {dag_id!r} has no TI of task {task_id!r} with map index "
                              f"{map_index}; see `engine tasks list {dag_id} {run_id}`")
        tries = {t.try_number: t for t in db.run(conn, "ti_tries", dag_id=dag_id, run_id=run_id, task_id=task_id,
                                                  map_index=map_index)}
    wanted = try_number or ti.try_number
    if wanted == 0:
        raise EngineError(f"{task_id} in run {run_id!r} has not started a try yet (state {ti.state}); "
                          "nothing logged")
    if wanted == ti.try_number and ti.log_path and ti.state != "none":
        path, host = ti.log_path, ti.hostname
    elif wanted in tries:
        path, host = tries[wanted].log_path, tries[wanted].hostname
    else:
        known = sorted(set(tries) | ({ti.try_number} if ti.try_number else set()))
        raise EngineError(f"{task_id} in run {run_id!r} has no try {wanted}; its tries: "
                          f"{', '.join(map(str, known)) or 'none'}")
    if not path:
        raise EngineError(f"try {wanted} of {task_id} in run {run_id!r} has no log path recorded")
    log_file = Path(path)
    if not log_file.exists():
        if host and host != socket.gethostname():
            raise EngineError(f"the log of try {wanted} is on host {host} ({path}), not on this one "
                              f"({socket.gethostname()}); read it there")
        raise EngineError(f"the log of try {wanted} ({path}) does not exist (not started yet, or removed)")
    offset = stream(log_file, 0)
    while follow:
        with db.connect(eng) as conn:
            now = _ti(conn, dag_id, run_id, task_id, map_index)
        running = now is not None and now.try_number == wanted and now.state in LIVE
        offset = stream(log_file, offset)
        if not running:
            offset = stream(log_file, offset)
            break
        time.sleep(poll)
