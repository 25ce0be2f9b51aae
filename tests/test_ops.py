"""Operations on both dialects: `engine status --check` (exit codes, one line per problem), the
Prometheus endpoint (scraped), `engine metrics`, and log lines (one INFO per pass that did work,
none when idle; JSON lines)."""
from __future__ import annotations

import json
import logging
import socket
import urllib.request

from click.testing import CliRunner

from cli.main import main
from engine import logs, metrics
from engine.jobs import Job
from engine.scheduler import Scheduler
from tests.helpers import sql, sync_source, tick, trigger

DAGS = """
with DAG("ops"):
    BashTask("a", bash_command="true", pool="p")
    BashTask("b", bash_command="true", queue="other")
"""


def cli(db_url, *args):
    # The tests sync folders under the temporary directory: "/" is their DAGs folder.
    return CliRunner().invoke(main, ["--database-url", db_url, *args], env={"ENGINE_DAGS_FOLDER": "/"})


def test_status_check_exit_codes_and_one_line_per_problem(db_url, eng, cfg, tmp_path):
    r = cli(db_url, "status", "--check")
    assert r.exit_code == 2 and r.output.splitlines() == [r.output.splitlines()[0]]
    assert r.output.startswith("no_scheduler: no live scheduler")
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('p', 4, false)")
    sync_source(eng, tmp_path / "dags", DAGS)
    trigger(eng, "ops", "r1")
    tick(eng, cfg)  # a scheduler that ticked just now counts as live (cron ticks end at once)
    assert sql(eng, "SELECT count(*) FROM task_instance WHERE state = 'queued'")[0][0] == 2
    r = cli(db_url, "status", "--check")
    assert r.exit_code == 2, r.output
    assert sorted(line.split(":")[0] + " " + line.split()[2] for line in r.output.splitlines()) == \
        ["no_worker default", "no_worker other"]
    # TIs of another executor wait for its dispatcher, not for an `engine worker` of their queue
    sql(eng, "UPDATE task_instance SET executor = 'celery' WHERE queue = 'other'")
    r = cli(db_url, "status", "--check")
    assert sorted(line.split(":")[0] + " " + line.split()[2] for line in r.output.splitlines()) == \
        ["no_dispatcher celery", "no_worker default"]
    assert "start `engine dispatcher --executor celery`" in r.output
    Job(eng, "dispatcher", 5, queues=["celery"]).register()
    r = cli(db_url, "status", "--check")
    assert [line.split(":")[0] + " " + line.split()[2] for line in r.output.splitlines()] == ["no_worker default"]
    sql(eng, "UPDATE task_instance SET executor = 'default' WHERE queue = 'other'")
    Job(eng, "worker", 5, queues=["default", "x"]).register()
    r = cli(db_url, "status", "--check", "--json")
    assert r.exit_code == 2 and [p["problem"] for p in json.loads(r.output)["problems"]] == ["no_worker"]
    Job(eng, "worker", 5, queues=["other"]).register()
    r = cli(db_url, "status", "--check")
    assert (r.exit_code, r.output) == (0, "healthy\n")
    r = cli(db_url, "status", "--check", "--max-queued-age", "0.000001")
    assert r.exit_code == 2 and r.output.startswith("queued_too_long: the oldest queued TI")
    assert cli(db_url, "drain").exit_code == 0
    r = cli(db_url, "status", "--check")
    assert r.exit_code == 2 and r.output.startswith("draining: the deployment is draining")
    r = cli(db_url, "status", "--check", "--max-queued-age", "nan")
    assert r.exit_code == 1 and "--max-queued-age" in r.output
    assert "Traceback" not in r.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_endpoint_is_scraped_and_engine_metrics_prints_the_same(db_url, eng, cfg, tmp_path, caplog):
    sql(eng, "INSERT INTO pool (name, slots, include_deferred) VALUES ('p', 4, false)")
    sync_source(eng, tmp_path / "dags", DAGS)
    trigger(eng, "ops", "r1")
    sched = Scheduler(eng, cfg)
    sched.start()
    port = _free_port()
    server = metrics.serve(cfg, eng, sched.job, "scheduler", port=port)
    def scrape():
        return set(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode().splitlines())
    try:
        before = scrape()  # this scheduler's job is running
        assert 'engine_jobs_running{kind="scheduler"} 1.0' in before
        assert any(line.startswith('engine_job_heartbeat_age_seconds{hostname=') for line in before)
        with caplog.at_level(logging.INFO, logger="engine.scheduler"):
            sched.loop(max_ticks=3)  # queues both TIs, then idle passes
        worked = [r for r in caplog.records if r.name == "engine.scheduler" and r.levelno == logging.INFO]
        assert len(worked) == 1 and "queued=2" in worked[0].getMessage() and worked[0].summary["tis_queued"] == 2
        lines = scrape()
    finally:
        server.shutdown()
        server.server_close()
    assert "engine_database_up 1.0" in lines
    assert 'engine_task_instances{pool="p",queue="default",state="queued"} 1.0' in lines
    assert 'engine_task_instances{pool="default_pool",queue="other",state="queued"} 1.0' in lines
    assert 'engine_pool_open_slots{pool="p"} 3.0' in lines and 'engine_pool_queued_slots{pool="p"} 1.0' in lines
    assert "engine_scheduler_tasks_starving 0.0" in lines
    assert 'engine_jobs_running{kind="scheduler"} 0.0' in lines  # loop() ended: its job finished
    assert any(line.startswith("engine_scheduler_scheduler_loop_duration_seconds_count ") for line in lines)
    assert any(line.startswith("engine_scheduler_passes_total ") for line in lines)
    # `engine metrics`: the same database samples, once.
    r = cli(db_url, "metrics")
    assert r.exit_code == 0 and 'engine_task_instances{pool="p",queue="default",state="queued"} 1.0' in r.output
    samples = [json.loads(x) for x in cli(db_url, "metrics", "--json").output.splitlines()]
    assert {"metric": "engine_pool_open_slots", "labels": {"pool": "p"}, "value": 3.0} in samples


def test_json_log_lines():
    record = logging.LogRecord("engine.scheduler", logging.INFO, __file__, 1, "tick: %s", ("x",), None)
    record.summary = {"tis_queued": 2}
    line = json.loads(logs.JsonFormatter().format(record))
    assert line["level"] == "INFO" and line["message"] == "tick: x" and line["summary"] == {"tis_queued": 2}


PAUSE_DAGS = """
from engine import DAG, BashTask
with DAG("p1"):
    BashTask("a", bash_command="true")
with DAG("p2", is_paused_upon_creation=False):
    BashTask("a", bash_command="true")
"""


def test_new_dags_paused_at_creation_and_sync_check(db_url, eng, tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINE_DAGS_ARE_PAUSED_AT_CREATION", "true")  # the default outside the test suite
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "d.py").write_text(PAUSE_DAGS)
    r = cli(db_url, "dags", "sync", "--check", str(folder))
    assert (r.exit_code, r.output) == (0, f"ok: 2 DAG(s) in {folder}: p1, p2\n")
    assert sql(eng, "SELECT count(*) FROM dag")[0][0] == 0  # --check writes nothing
    (folder / "bad.py").write_text("from engine import DAG\nDAG('x', schedule='not cron', start_date='2026-01-01')\n")
    r = cli(db_url, "dags", "sync", "--check", str(folder))
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1 and "bad.py" in r.output
    (folder / "bad.py").unlink()
    assert cli(db_url, "dags", "sync", str(folder)).exit_code == 0
    paused = dict(sql(eng, "SELECT dag_id, is_paused FROM dag ORDER BY dag_id"))
    assert {k: bool(v) for k, v in paused.items()} == {"p1": True, "p2": False}
    assert cli(db_url, "dags", "unpause", "p1").exit_code == 0
    assert cli(db_url, "dags", "sync", str(folder)).exit_code == 0  # an existing DAG keeps its state
    assert not sql(eng, "SELECT is_paused FROM dag WHERE dag_id = 'p1'")[0][0]


def test_pool_of_zero_slots_holds_its_work_until_opened(db_url, eng, cfg, tmp_path):
    r = cli(db_url, "pools", "set", "p", "0")
    assert r.exit_code == 0 and "closed" in r.output
    sync_source(eng, tmp_path / "dags", 'with DAG("z"):\n    BashTask("a", bash_command="true", pool="p", pool_slots=2)\n')
    trigger(eng, "z", "r1")
    tick(eng, cfg)
    tick(eng, cfg)
    assert sql(eng, "SELECT state FROM task_instance")[0][0] == "scheduled"
    assert [tuple(x) for x in sql(eng, "SELECT task_id, reason FROM pending_reasons")] == [("a", "pool closed")]
    assert 'engine_pool_starving_tasks{pool="p"} 1.0' in cli(db_url, "metrics").output
    assert cli(db_url, "pools", "set", "p", "1").exit_code == 1  # below the task's pool_slots: refused
    assert cli(db_url, "pools", "set", "p", "2").exit_code == 0
    tick(eng, cfg)
    assert sql(eng, "SELECT state FROM task_instance")[0][0] == "queued"


def test_db_url_and_db_shell(db_url):
    import os
    import subprocess
    import sys

    r = cli(db_url, "db", "url")
    assert r.exit_code == 0 and r.output.strip() == db_url
    shown = cli(db_url, "db", "shell", "--print").output
    assert ("psql" in shown) if db_url.startswith("postgresql") else ("mariadb" in shown or "mysql" in shown)
    flag = "-tAc" if db_url.startswith("postgresql") else "-sNe"
    done = subprocess.run([sys.executable, "-m", "cli.main", "db", "shell", "--", flag, "SELECT 40 + 2"],
                          env={**os.environ, "ENGINE_DATABASE_URL": db_url}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "42", done.stderr


def test_log_format_json_from_the_command_line(db_url, eng, tmp_path):
    """`engine --log-format json scheduler`: every log line is JSON; a pass that did work logs
    one INFO line with its summary, an idle pass none."""
    import os
    import subprocess
    import sys

    sync_source(eng, tmp_path / "dags", 'with DAG("j"):\n    BashTask("a", bash_command="true")\n')
    trigger(eng, "j", "r1")

    def tick_lines(passes):
        done = subprocess.run([sys.executable, "-m", "cli.main", "-v", "--log-format", "json", "scheduler",
                               "--max-ticks", str(passes)],
                              env={**os.environ, "ENGINE_DATABASE_URL": db_url}, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stderr.splitlines() if line.strip()]  # each one JSON
    # three passes: the first queues the TI, the other two are idle and log nothing at INFO
    worked = [x for x in tick_lines(3) if x["logger"] == "engine.scheduler" and x["level"] == "INFO"]
    assert len(worked) == 1 and worked[0]["summary"]["tis_queued"] == 1, worked


def test_bad_metrics_port_is_one_line():
    """--metrics-port and the setting metrics_port: a port number, refused in one line before
    anything starts (no database needed)."""
    for args, env, needle in [(["scheduler", "--metrics-port", "70000"], {}, "70000"),
                              (["worker", "--metrics-port", "-1"], {}, "-1"),
                              (["triggerer"], {"ENGINE_METRICS_PORT": "http"}, "metrics_port")]:
        r = CliRunner().invoke(main, ["--database-url", "postgresql+psycopg://nobody@127.0.0.1:1/none", *args],
                               env=env)
        assert r.exit_code != 0 and needle in r.output, (args, r.output)
        assert len([line for line in r.output.splitlines() if "rror" in line]) == 1, r.output
