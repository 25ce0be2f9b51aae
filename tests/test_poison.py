"""A mixed deployment where one DAG carries each poison value keeps running every other DAG.

The values `dags sync` refuses (tests/test_hostile.py) are written here the way they reach a
real database anyway: rows stored before the checks existed, or edited by hand from a SQL
console. Then a real scheduler pass and a real worker (tries in subprocesses) run the
deployment until the bystanders are done, and the test asserts:
- no pass fails a step, and the bystanders (including a run whose id holds '/..', inserted by
  hand) succeed;
- each poisoned DAG, run or TI ends as the contract says (a retry within range, a failed try
  with the reason, a TI that waits with the right reason, an error recorded against the DAG);
- every log file is inside the log folder.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from click.testing import CliRunner

from cli.main import main as engine_cli
from engine import calls, db
from engine.scheduler import Scheduler, queue_knobs
from engine.worker import Worker
from tests.helpers import run_states, sql, sync_source, trigger

DAGS = """
with DAG("bystander", max_active_tasks=8):
    BashTask("a", bash_command="true") >> BashTask("b", bash_command="true")
with DAG("p_retry"):
    BashTask("t", bash_command="false", retries=2, retry_delay=1)
with DAG("p_backoff"):
    BashTask("t", bash_command="false", retries=3, retry_delay=1, retry_exponential_backoff=True)
with DAG("p_orphan"):
    BashTask("t", bash_command="true", retries=2, retry_delay=1)
with DAG("p_start", schedule="@daily", start_date="2026-01-01"):
    BashTask("t", bash_command="true")
with DAG("x.y"):
    BashTask("z", bash_command="true", max_active_tis_per_dag=1)
with DAG("x"):
    BashTask("y.z", bash_command="true", max_active_tis_per_dag=1)
with DAG("p_pool"):
    BashTask("t", bash_command="true")
with DAG("p_exec"):
    BashTask("t", bash_command="true")
with DAG("p_defer"):
    PythonTask("t", python_callable="poison_tasks:nan_defer")
"""

TASKS = '''
from engine import Defer, TimeDeltaTrigger


def nan_defer():
    raise Defer(trigger=TimeDeltaTrigger(seconds=1), method="resume", kwargs={"x": float("nan")})
'''

TRIGGERED = ["bystander", "p_retry", "p_backoff", "p_orphan", "x.y", "x", "p_pool", "p_exec", "p_defer"]
HOSTILE_RUN_ID = "../../../../tmp/x/outside"


def ti(eng, dag_id):
    return sql(eng, "SELECT id, state, try_number, retry_at, state_reason FROM task_instance WHERE dag_id = :d",
               d=dag_id)[0]


def test_every_poison_at_once_stops_nobody_else(eng, cfg, tmp_path, monkeypatch):
    folder = tmp_path / "dags"
    sync_source(eng, folder, DAGS)
    (folder / "poison_tasks.py").write_text(TASKS)
    for dag_id in TRIGGERED:
        trigger(eng, dag_id)
    # A run whose id escapes the log folder if joined naively, as a hand-written row would.
    sql(eng, "INSERT INTO dag_run (dag_id, run_id, run_type, state, logical_date, run_after, conf, created_at) "
             "SELECT 'bystander', :r, 'manual', 'queued', logical_date, run_after, conf, created_at "
             "FROM dag_run WHERE dag_id = 'bystander'", r=HOSTILE_RUN_ID)
    # Poison stored by hand: delays no timestamp can hold, a start date past what Python reads.
    sql(eng, "UPDATE task SET retry_delay = 1e300 WHERE dag_id IN ('p_retry', 'p_orphan')")
    sql(eng, "UPDATE task SET retry_delay = 1e300, max_retry_delay = 1e300 WHERE dag_id = 'p_backoff'")
    sql(eng, "UPDATE dag SET start_date = :d, next_dagrun = NULL, next_dagrun_create_after = NULL "
             "WHERE dag_id = 'p_start'", d="9999-12-31 23:59:59")

    sched = Scheduler(eng, cfg)
    summaries = [sched.run_once()]  # runs start, TIs are created
    # TIs whose pool or executor row is gone (put back to scheduled: the first pass queued them).
    sql(eng, "UPDATE task_instance SET pool = 'ghost', state = 'scheduled', queued_at = NULL WHERE dag_id = 'p_pool'")
    sql(eng, "UPDATE task_instance SET executor = 'ghost', state = 'scheduled', queued_at = NULL "
             "WHERE dag_id = 'p_exec'")
    # p_orphan's try is claimed by a worker that then dies (its heartbeat is a day old).
    with db.connect(eng) as conn:
        dead = db.run(conn, "register_job", kind="worker", hostname="gone", pid=1).scalar_one()
    sql(eng, "UPDATE task_instance SET state = 'scheduled' WHERE dag_id = 'p_orphan' AND state = 'none'")
    with db.connect(eng) as conn:
        db.run(conn, "queue_tis", max_tis=100, job_id=None, now=None, **queue_knobs()).all()
    sql(eng, "UPDATE task_instance SET state = 'running', try_number = 1, worker_job_id = :j, start_date = now() "
             "WHERE dag_id = 'p_orphan' AND state = 'queued'", j=dead)
    sql(eng, "UPDATE job SET latest_heartbeat = latest_heartbeat - INTERVAL '1' DAY WHERE id = :j", j=dead)
    sql(eng, "UPDATE scheduler_lock SET last_run_at = NULL WHERE name = 'reset_orphans'")

    monkeypatch.chdir(tmp_path)
    worker = Worker(eng, cfg)
    worker.start()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            summaries.append(sched.run_once())
            worker.run_once()
            done = set(run_states(eng, "bystander")) == {"success"} and \
                all(run_states(eng, d) == ["success"] for d in ("x.y", "x")) and \
                ti(eng, "p_retry").state == "up_for_retry" and ti(eng, "p_backoff").state == "up_for_retry" and \
                ti(eng, "p_orphan").state == "up_for_retry" and ti(eng, "p_defer").state == "failed"
            if done:
                break
            time.sleep(0.1)
        worker_job = worker.job.id
        alive = sql(eng, "SELECT state FROM job WHERE id = :j", j=worker_job)[0][0]
    finally:
        worker.stop(timeout=5)
        sched.stop()

    assert [s["errors"] for s in summaries if s["errors"]] == []
    assert alive == "running", "the worker died of a task's values"
    assert run_states(eng, "bystander") == ["success", "success"]
    assert run_states(eng, "x.y") == ["success"] and run_states(eng, "x") == ["success"]
    for dag_id in ("p_retry", "p_backoff", "p_orphan"):
        row = ti(eng, dag_id)
        assert row.state == "up_for_retry" and row.retry_at.year < 9999, (dag_id, row)
    assert ti(eng, "p_orphan").state_reason and "died" in ti(eng, "p_orphan").state_reason
    defer = ti(eng, "p_defer")
    assert defer.state == "failed" and "nan" in (defer.state_reason or "").lower(), defer
    reasons = dict(sql(eng, "SELECT dag_id, reason FROM pending_reasons WHERE dag_id IN ('p_pool', 'p_exec')"))
    assert reasons == {"p_pool": "unknown pool", "p_exec": "unknown executor"}
    assert sql(eng, "SELECT count(*) FROM dag_run WHERE dag_id = 'p_start'")[0][0] == 0
    # Everything stored is still readable by Python, and the CLI lists it.
    sql(eng, "SELECT * FROM dag")
    listing = CliRunner().invoke(engine_cli, ["dags", "list"], env={"ENGINE_DATABASE_URL": str(
        eng.url.render_as_string(hide_password=False))})
    assert listing.exit_code == 0 and "p_start" in listing.output, listing.output
    # Every log stays inside the log folder.
    logs = Path(cfg.log_path).resolve()
    paths = [p for (p,) in sql(eng, "SELECT log_path FROM task_instance WHERE log_path IS NOT NULL")]
    assert paths and all(Path(os.path.realpath(p)).is_relative_to(logs) for p in paths), paths
    assert not Path("/tmp/x/outside").exists()


def test_a_step_the_database_refuses_as_a_whole_does_not_stop_the_pass(eng, cfg, tmp_path, db_url):
    """The last line of defence: should a whole step fail (here its procedure was dropped by
    hand), the pass reports it and runs every other step; `engine tick` says which step failed
    and exits 1; `engine db upgrade` repairs it."""
    from engine.scheduler import format_summary
    from tests.helpers import claim, finish, tick

    sync_source(eng, tmp_path / "dags", 'with DAG("d"):\n    BashTask("a", bash_command="true") >> '
                                        'BashTask("b", bash_command="true")\n')
    trigger(eng, "d")
    tick(eng, cfg)
    (a,) = claim(eng)
    finish(eng, a)
    kind = "FUNCTION" if eng.dialect.name == "postgresql" else "PROCEDURE"
    called = f"create_dag_runs_v{calls.shipped(db.dialect_dir(eng))['create_dag_runs']}"  # the version a pass calls
    sql(eng, f"DROP {kind} {called}")
    summary = tick(eng, cfg)
    assert [e["step"] for e in summary["errors"]] == ["create_dag_runs"]
    assert called in summary["errors"][0]["error"]
    assert summary["tis_scheduled"] == 1 and summary["tis_queued"] == 1  # b: the later steps ran
    assert "failed=create_dag_runs" in format_summary(summary)
    assert "create_dag_runs" in sql(eng, "SELECT errors FROM tick_log ORDER BY id DESC")[0][0]
    env = {"ENGINE_DATABASE_URL": db_url, "ENGINE_HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(engine_cli, ["tick"], env=env)
    assert result.exit_code == 1 and "tick: runs created=0" in result.stdout
    assert result.stderr.startswith("error: step create_dag_runs failed: ") and len(result.stderr.splitlines()) == 1
    assert CliRunner().invoke(engine_cli, ["db", "upgrade"], env=env).exit_code == 0
    result = CliRunner().invoke(engine_cli, ["tick", "--json"], env=env)
    assert result.exit_code == 0 and '"errors": []' in result.stdout
