"""Small drivers for tests: write DAG files, tick, claim and finish TIs like a worker would."""
from __future__ import annotations

import re
import textwrap
import threading
import time
from pathlib import Path

import sqlalchemy as sa

from engine import db
from engine.dagsync import sync
from engine.scheduler import Scheduler


def write_dags(folder: Path, source: str, name: str = "dags.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("from engine import DAG, BashTask, PythonTask\n" + textwrap.dedent(source))
    return path


def sync_source(eng, folder: Path, source: str) -> dict:
    write_dags(folder, source)
    return sync(eng, folder)


TEST_SQL = Path(__file__).resolve().parent / "sql"


def run_sql_file(eng, name: str) -> None:
    """Run tests/sql/<dialect>/<name>.sql: SQL a test needs that no dialect-neutral spelling
    has (DDL, a DBA's hand edit). Statements end with ';' at the end of a line."""
    text = (TEST_SQL / db.dialect_dir(eng) / f"{name}.sql").read_text()
    with eng.begin() as conn:
        for stmt in re.split(r";[ \t]*$", text, flags=re.M):
            if re.sub(r"--[^\n]*", "", stmt).strip():
                conn.exec_driver_sql(stmt)


def sql(eng, text: str, **params):
    with eng.begin() as conn:
        result = conn.execute(sa.text(text), params)
        return result.all() if result.returns_rows else result.rowcount


def metrics_0008_sql(dialect: str) -> str:
    """The metrics view as revision 0008 defined it (its text before 0061), as view metrics_0008:
    for comparing the current view with it (tests/test_pending_counts.py, loadtests/bench_status.py)."""
    from engine.paths import SQL_DIR

    text = (SQL_DIR / dialect / "previous" / "0061" / "metrics.sql").read_text()
    assert "CREATE VIEW metrics AS" in text
    return text.replace("CREATE VIEW metrics AS", "CREATE VIEW metrics_0008 AS", 1)


def pending_counts_agree(eng) -> bool:
    """The view pending_counts holds what pending_reasons says TI by TI, counted by pool and reason."""
    per_ti = sql(eng, "SELECT pool, reason, COUNT(*) FROM pending_reasons GROUP BY pool, reason")
    counted = sql(eng, "SELECT pool, reason, tis FROM pending_counts")
    return sorted(map(tuple, per_ti)) == sorted(map(tuple, counted))


def trigger(eng, dag_id: str, run_id: str | None = None, now=None):
    with db.connect(eng) as conn:
        return db.run(conn, "trigger_dag", dag_id=dag_id, run_id=run_id, conf="{}", now=now).one()


def started_run(eng, folder: Path, dag_id: str, tasks: int) -> list[int]:
    """One started run of a DAG of `tasks` independent BashTasks t00, t01, ...: its TI ids in
    task order (each TI is then set up by hand, e.g. by a model test)."""
    body = "\n".join(f"    BashTask('t{i:02d}', bash_command='true')" for i in range(tasks))
    sync_source(eng, folder, f"with DAG({dag_id!r}):\n{body}\n")
    trigger(eng, dag_id, run_id="r")
    with db.connect(eng) as conn:
        db.run(conn, "create_dag_runs", now=None).one()  # starts the run: one TI per task
    return [r.id for r in sql(eng, "SELECT id FROM task_instance WHERE dag_id = :d ORDER BY task_id", d=dag_id)]


def claimed_python_tasks(eng, cfg, folder: Path, names, retries=None, pools=None) -> dict:
    """DAG 'b' of one PythonTask per name (retries and pool per name, else 0 and the default
    pool), triggered, scheduled and claimed: {task_id: claimed row}."""
    retries, pools = retries or {}, pools or {}
    tasks = "\n".join(f"    PythonTask({n!r}, python_callable='x:y', retries={retries.get(n, 0)}, retry_delay=0"
                      f"{', pool=' + repr(pools[n]) if n in pools else ''})" for n in names)
    sync_source(eng, folder, f"with DAG('b', max_active_tasks=None):\n{tasks}\n")
    sql(eng, "UPDATE dag SET is_paused = false")
    trigger(eng, "b")
    tick(eng, cfg)
    tis = {ti.task_id: ti for ti in claim(eng)}
    assert sorted(tis) == sorted(names)
    return tis


def tick(eng, cfg, now=None) -> dict:
    s = Scheduler(eng, cfg)
    try:
        return s.run_once(now=now)
    finally:
        s.stop()


def claim(eng, limit: int = 1000, queues=("default",), now=None) -> list:
    with db.connect(eng) as conn:
        return db.run(conn, "claim_tis", job_id=None, hostname="test", queues=list(queues), limit=limit,
                      log_dir="/tmp/engine-test-logs", now=now).all()


def finish(eng, ti, exit_code: int = 0, timed_out: bool = False, now=None):
    with db.connect(eng) as conn:
        return db.run(conn, "finish_ti", ti_id=ti.ti_id, try_number=ti.try_number, exit_code=exit_code,
                      timed_out=timed_out, reason=None, now=now).scalar()


def ti_states(eng, dag_id: str | None = None) -> dict:
    where = "WHERE dag_id = :d " if dag_id is not None else ""
    rows = sql(eng, f"SELECT task_id, map_index, state FROM task_instance {where}ORDER BY id", d=dag_id)
    return {(r.task_id if r.map_index < 0 else f"{r.task_id}[{r.map_index}]"): r.state for r in rows}


def run_states(eng, dag_id: str) -> list[str]:
    return [r.state for r in sql(eng, "SELECT state FROM dag_run WHERE dag_id = :d ORDER BY id", d=dag_id)]


def drive(eng, cfg, outcomes: dict | None = None, now=None, max_rounds: int = 50) -> None:
    """Tick and finish every claimed TI with outcomes[task_id] (default 0) until nothing moves."""
    outcomes = outcomes or {}
    for _ in range(max_rounds):
        summary = tick(eng, cfg, now=now)
        claimed = claim(eng, now=now)
        for ti in claimed:
            finish(eng, ti, outcomes.get(ti.task_id, 0), now=now)
        if not claimed and summary["tis_scheduled"] == 0 and summary["runs_finished"] == 0 \
                and summary["runs_started"] == 0 and summary["tis_queued"] == 0:
            return
    raise AssertionError("drive(): the engine did not settle")


def until(step, done, what, rounds=1200):
    """Call step() until done(): a deadline in rounds, never a sleep-and-hope."""
    for _ in range(rounds):
        if done():
            return
        step()
        time.sleep(0.05)
    raise AssertionError(f"never reached: {what}")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


WAITING = {  # the session `pid` waits for a lock
    "postgresql": "SELECT count(*) FROM pg_locks WHERE pid = :pid AND NOT granted",
    "mysql": "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = :pid "
             "AND trx_state = 'LOCK WAIT'"}
SESSION_ID = {"postgresql": "SELECT pg_backend_pid()", "mysql": "SELECT CONNECTION_ID()"}


def start_in_thread(eng, target, outcome: dict, key: str) -> threading.Thread:
    """`target(conn)` on its own connection in a thread; outcome[key] its result or error,
    outcome[key + '_pid'] its session id (before it starts)."""
    def run():
        try:
            with eng.connect() as c:
                outcome[key + "_pid"] = c.execute(sa.text(SESSION_ID[db.dialect_dir(eng)])).scalar()
                c.commit()
                outcome[key] = target(c)
                c.commit()
        except Exception as exc:  # noqa: BLE001 - judged by the test
            outcome[key] = exc
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def until_waiting_or_done(eng, thread, outcome: dict, pid_key: str) -> bool:
    """Until the session outcome[pid_key] waits for a lock (True) or the thread ended (False)."""
    with eng.connect() as c:
        while thread.is_alive():
            pid = outcome.get(pid_key)
            if pid is not None and c.execute(sa.text(WAITING[db.dialect_dir(eng)]), {"pid": pid}).scalar():
                return True
            c.rollback()
            thread.join(0.2)   # (INNODB_TRX is refreshed only when last read 0.1 s ago or more)
    return False


class PauseAfter:
    """Stops the thread named `thread` just after its call of the named query `query` (its
    transaction open) until release(); outcome[<thread name>_pid] is the session id of each
    thread's connection, recorded at its first named query. Patches engine.db.run."""

    def __init__(self, monkeypatch, outcome: dict, thread: str, query: str):
        self.reached, self.go = threading.Event(), threading.Event()
        real = db.run

        def run(conn, name, /, **params):
            me = threading.current_thread().name
            if me + "_pid" not in outcome:
                outcome[me + "_pid"] = conn.execute(sa.text(SESSION_ID[db.dialect_dir(conn)])).scalar()
            result = real(conn, name, **params)
            if me == thread and name == query and not self.reached.is_set():
                self.reached.set()
                self.go.wait(60)
            return result
        monkeypatch.setattr(db, "run", run)

    def release(self) -> None:
        self.go.set()


def run_named(name: str, fn, outcome: dict) -> threading.Thread:
    """fn() in a thread named `name`; outcome[name] its result or error."""
    def body():
        try:
            outcome[name] = fn()
        except Exception as exc:  # noqa: BLE001 - judged by the test
            outcome[name] = exc
    thread = threading.Thread(target=body, name=name)
    thread.start()
    return thread
