"""Hostile input: every boundary refuses a value the database could not store or compute with,
in one line naming the thing and the fix, writes nothing, and everybody else goes on.

The cases share one database per dialect (`module_db_url`), which holds a bystander DAG synced
before the first case. Each case runs the real command line in-process (click's CliRunner,
the same code `engine ...` runs) and asserts:
- a non-zero exit, and exactly one line on stderr, starting with "error:", containing the
  needles (the thing and the allowed range or the fix), and no traceback;
- nothing stored changed (a snapshot of every definition and state table, before and after);
- at the end of the module, the bystander DAG still runs to success through the scheduler.
Values that come from task code (Defer, triggers, events) and poison values already stored
in the database are in tests/test_poison.py.
"""
from __future__ import annotations

import json
import textwrap

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from cli.main import main as engine_cli
from engine import db

BYSTANDER = """
from engine import DAG, BashTask

with DAG("bystander", max_active_tasks=4):
    BashTask("b1", bash_command="true", pool_slots=2) >> BashTask("b2", bash_command="true")
"""

# Tables whose content no refused command may change (timestamps of jobs and ticks excluded:
# nothing here runs a service).
TABLES = ["dag", "task", "task_dependency", "dag_run", "task_instance", "pool", "executor", "trigger",
          "deployment", "procedure_version"]


def snapshot(eng) -> dict:
    with eng.connect() as conn:
        quote = conn.dialect.identifier_preparer.quote  # `trigger` is a reserved word on MySQL
        return {t: sorted(tuple(str(v) for v in row) for row in conn.execute(sa.text(f"SELECT * FROM {quote(t)}")))
                for t in TABLES}


@pytest.fixture(scope="module")
def world(module_db_url, tmp_path_factory):
    """The shared database with the bystander DAG synced; yields (url, engine, folder)."""
    folder = tmp_path_factory.mktemp("bystander")
    (folder / "bystander.py").write_text(BYSTANDER)
    runner = CliRunner()
    result = runner.invoke(engine_cli, ["dags", "sync", str(folder)],
                           env={"ENGINE_DATABASE_URL": module_db_url, "ENGINE_DAGS_FOLDER": "/"})
    assert result.exit_code == 0, result.output
    eng = db.make_engine(module_db_url)
    yield module_db_url, eng, folder
    eng.dispose()


def run(url, *args, env=None):
    # The tests sync folders under the temporary directory: "/" is their DAGs folder.
    return CliRunner().invoke(engine_cli, list(args),
                              env={"ENGINE_DATABASE_URL": url, "ENGINE_DAGS_FOLDER": "/", **(env or {})})


def assert_refused(result, *needles):
    assert result.exit_code != 0, f"exit 0 for a bad input: {result.output}"
    assert isinstance(result.exception, SystemExit), f"not a clean exit: {result.exception!r}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"not one line: {result.stderr}"
    line = lines[0]
    assert line.startswith("error: ") and "Traceback" not in result.output, line
    for n in needles:
        assert n in line, f"{n!r} not in: {line}"


def refused_and_unchanged(world, args, needles, env=None):
    url, eng, _ = world
    before = snapshot(eng)
    assert_refused(run(url, *args, env=env), *needles)
    assert snapshot(eng) == before, "a refused command changed stored data"


# ---- DAG files: `engine dags sync` ------------------------------------------------------------
# (case id, source of one DAG file (imports added), needles)
T = 'BashTask("t", bash_command="true", {})'
DAG_CASES = [
    ("retry_delay_1e300", T.format("retry_delay=1e300"), ["task 't'", "retry_delay", "3,153,600,000 seconds"]),
    ("retry_delay_nan", T.format("retry_delay=float('nan')"), ["retry_delay", "nan"]),
    ("retry_delay_inf", T.format("retry_delay=float('inf')"), ["retry_delay", "inf"]),
    ("retry_delay_negative", T.format("retry_delay=-1"), ["retry_delay", "-1"]),
    ("retry_delay_200_years", T.format("retry_delay=timedelta(days=365 * 200)"), ["retry_delay"]),
    ("max_retry_delay_1e300", T.format("max_retry_delay=1e300"), ["max_retry_delay"]),
    ("max_retry_delay_nan", T.format("max_retry_delay=float('nan')"), ["max_retry_delay"]),
    ("execution_timeout_1e13", T.format("execution_timeout=1e13"), ["execution_timeout"]),
    ("execution_timeout_nan", T.format("execution_timeout=float('nan')"), ["execution_timeout"]),
    ("execution_timeout_zero", T.format("execution_timeout=0"), ["execution_timeout", "more than 0"]),
    ("pool_slots_2_40", T.format("pool_slots=2**40"), ["pool_slots", "from 1 to 1000000"]),
    ("pool_slots_zero", T.format("pool_slots=0"), ["pool_slots"]),
    ("pool_slots_bool", T.format("pool_slots=True"), ["pool_slots"]),
    ("pool_slots_float", T.format("pool_slots=2.0"), ["pool_slots"]),
    ("pool_slots_wider_than_pool", T.format("pool_slots=129"), ["pool_slots=129", "default_pool", "128"]),
    ("priority_weight_2_31", T.format("priority_weight=2**31"), ["priority_weight", "2147483647"]),
    ("priority_weight_minus_2_31", T.format("priority_weight=-2**31"), ["priority_weight"]),
    ("priority_weight_nan", T.format("priority_weight=float('nan')"), ["priority_weight"]),
    ("retries_2_40", T.format("retries=2**40"), ["retries", "from 0 to 1000"]),
    ("retries_negative", T.format("retries=-1"), ["retries"]),
    ("retries_float", T.format("retries=1.5"), ["retries"]),
    ("max_active_tis_per_dag_2_40", T.format("max_active_tis_per_dag=2**40"), ["max_active_tis_per_dag"]),
    ("max_active_tis_per_dagrun_zero", T.format("max_active_tis_per_dagrun=0"), ["max_active_tis_per_dagrun"]),
    ("bash_command_nul", 'BashTask("t", bash_command="echo a\\x00b")', ["bash_command", "NUL"]),
    ("env_value_nul", T.format('env={"A": "x\\x00"}'), ["env", "NUL"]),
    ("env_name_with_equals", T.format('env={"A=B": "x"}'), ["env", "'A=B'"]),
    ("op_kwargs_nan", 'PythonTask("t", python_callable="m:f", op_kwargs={"x": float("nan")})', ["op_kwargs", "nan"]),
    ("op_kwargs_inf", 'PythonTask("t", python_callable="m:f", op_kwargs={"x": [float("inf")]})', ["op_kwargs"]),
    ("op_kwargs_nul", 'PythonTask("t", python_callable="m:f", op_kwargs={"x": "a\\x00b"})', ["op_kwargs", "NUL"]),
    ("op_kwargs_nul_key", 'PythonTask("t", python_callable="m:f", op_kwargs={"a\\x00": 1})', ["op_kwargs", "NUL"]),
    ("op_kwargs_huge_int", 'PythonTask("t", python_callable="m:f", op_kwargs={"x": 2**70})', ["op_kwargs", "64 bits"]),
    ("op_kwargs_object", 'PythonTask("t", python_callable="m:f", op_kwargs={"x": object()})', ["op_kwargs", "JSON"]),
    ("op_kwargs_int_key", 'PythonTask("t", python_callable="m:f", op_kwargs={1: 2})', ["op_kwargs", "key"]),
    ("expand_nan", 'PythonTask("t", python_callable="m:f").expand(x=[1.0, float("nan")])', ["expand", "nan"]),
    ("expand_too_many", 'PythonTask("t", python_callable="m:f").expand(x=list(range(100_001)))',
     ["expand", "100000"]),
    ("expand_bash_nul", 'BashTask("t", bash_command="true").expand(bash_command=["a\\x00"])', ["NUL"]),
    # Text that is not UTF-8 (a lone surrogate), text longer than MySQL's TEXT, JSON deeper than
    # MariaDB's 31 levels (less the levels of the DAG around it): refused on both dialects.
    ("bash_command_surrogate", 'BashTask("t", bash_command="echo \\ud800")', ["bash_command", "not valid UTF-8"]),
    ("bash_command_64k", 'BashTask("t", bash_command="#" * 65536)', ["bash_command", "65,536 bytes", "65,535"]),
    ("env_surrogate", T.format('env={"A": "\\udcff"}'), ["env", "not valid UTF-8"]),
    ("env_name_surrogate", T.format('env={"\\udcff": "x"}'), ["env variable name", "not valid UTF-8"]),
    ("op_kwargs_surrogate", 'PythonTask("t", python_callable="m:f", op_kwargs={"x": "\\ud800"})',
     ["op_kwargs", "not valid UTF-8"]),
    ("op_kwargs_surrogate_key", 'PythonTask("t", python_callable="m:f", op_kwargs={"\\ud800": 1})',
     ["op_kwargs", "key", "UTF-8"]),
    ("op_kwargs_29_deep", 'v = 1\nfor _ in range(28): v = [v]\nPythonTask("t", python_callable="m:f", op_kwargs={"v": v})',
     ["op_kwargs", "more than 28 levels"]),
    ("op_kwargs_100000_deep", 'v = 1\nfor _ in range(100000): v = [v]\n'
     'PythonTask("t", python_callable="m:f", op_kwargs={"v": v})', ["op_kwargs", "more than 28 levels"]),
    ("expand_28_deep", 'v = 1\nfor _ in range(27): v = [v]\nPythonTask("t", python_callable="m:f").expand(x=[v])',
     ["expand(x=...)", "more than 27 levels"]),
    ("python_callable_object", 'PythonTask("t", python_callable=print)', ["python_callable", "module.path:function"]),
    ("dag_id_dotdot", None, ["bad dag_id '..'", "not '.' or '..'"]),
    ("task_id_dot", 'BashTask(".", bash_command="true")', ["bad task_id '.'"]),
    ("task_id_slash", 'BashTask("a/b", bash_command="true")', ["bad task_id 'a/b'", "A-Z a-z 0-9"]),
    ("task_id_251", 'BashTask("t" * 251, bash_command="true")', ["bad task_id", "1-250"]),
    ("task_id_nul", 'BashTask("a\\x00", bash_command="true")', ["bad task_id"]),
    ("pool_bad_id", T.format('pool="a/b"'), ["bad pool"]),
    ("pool_unknown", T.format('pool="nowhere"'), ["unknown pool 'nowhere'", "engine pools set nowhere"]),
    ("queue_empty", T.format('queue=""'), ["bad queue"]),
    ("executor_unknown", T.format('executor="ghost"'), ["unknown executor 'ghost'"]),
    ("trigger_rule_bad", T.format('trigger_rule="sometimes"'), ["trigger_rule"]),
    ("description_nul", None, ["description", "NUL"]),
    ("description_surrogate", None, ["dag 'h'", "description", "not valid UTF-8"]),
    ("description_64k", None, ["description", "65,536 bytes", "65,535"]),
    ("tag_surrogate", None, ["tag", "not valid UTF-8"]),
    ("tag_nul", None, ["tag", "NUL"]),
    ("tag_empty", None, ["tag", "empty"]),
    ("max_active_runs_2_31", None, ["max_active_runs", "2147483647"]),
    ("max_active_tasks_zero", None, ["max_active_tasks"]),
    ("start_date_9999", None, ["start_date", "9999-12-31", "2999-12-31"]),
    ("start_date_year_1", None, ["start_date", "0001-01-01"]),
    ("schedule_minute_61", None, ["schedule", "61"]),
    ("schedule_never_fires", None, ["never fires"]),
    ("file_calls_os_exit", "import os\nos._exit(0)", ["h.py", "exited with code 0", "os._exit()"]),
    ("file_calls_sys_exit", "import sys\nsys.exit(3)", ["h.py", "SystemExit"]),
    ("file_raises", "raise RuntimeError('boom')", ["h.py", "RuntimeError: boom"]),
    ("cycle", 'a = BashTask("a", bash_command="true")\nb = BashTask("b", bash_command="true")\na >> b >> a',
     ["cycle a -> b -> a"]),
]
# Cases whose DAG(...) line itself is bad (the body is then one good task).
DAG_LINES = {
    "dag_id_dotdot": 'DAG("..")',
    "description_nul": 'DAG("h", description="a\\x00")',
    "description_surrogate": 'DAG("h", description="a\\ud800")',
    "description_64k": 'DAG("h", description="\\u00e9" * 32768)',
    "tag_surrogate": 'DAG("h", tags=["\\udcff"])',
    "tag_nul": 'DAG("h", tags=["a\\x00"])',
    "tag_empty": 'DAG("h", tags=[""])',
    "max_active_runs_2_31": 'DAG("h", max_active_runs=2**31)',
    "max_active_tasks_zero": 'DAG("h", max_active_tasks=0)',
    "start_date_9999": 'DAG("h", schedule="@daily", start_date="9999-12-31T23:59:59")',
    "start_date_year_1": 'DAG("h", schedule="@daily", start_date="0001-01-01")',
    "schedule_minute_61": 'DAG("h", schedule="61 * * * *", start_date="2026-01-01")',
    "schedule_never_fires": 'DAG("h", schedule="0 0 30 2 *", start_date="2026-01-01")',
}


def dag_file(case_id: str, body: str | None) -> str:
    head = DAG_LINES.get(case_id, 'DAG("h")')
    body = body or 'BashTask("t", bash_command="true")'
    return ("from datetime import timedelta\nfrom engine import DAG, BashTask, PythonTask\n"
            f"with {head}:\n" + textwrap.indent(body, "    ") + "\n")


@pytest.mark.parametrize("case_id, body, needles", DAG_CASES, ids=[c[0] for c in DAG_CASES])
def test_bad_dag_file_is_refused(world, tmp_path, case_id, body, needles):
    folder = tmp_path / "dags"
    folder.mkdir()
    if case_id.startswith("file_"):
        (folder / "h.py").write_text(body + "\n")
    else:
        (folder / "h.py").write_text(dag_file(case_id, body))
    refused_and_unchanged(world, ["dags", "sync", str(folder)], needles)


DEEP_AT_THE_BOUND = """
from engine import DAG, PythonTask
v, w = 1, 1
for _ in range(27):
    v = [v]
for _ in range(26):
    w = [w]
with DAG("deep_ok", description="\\u00e9" * 32767 + "a"):
    PythonTask("t", python_callable="m:f", op_kwargs={"v": v})
    PythonTask("m", python_callable="m:f").expand(x=[w])
"""


def test_values_at_the_bounds_are_stored_on_both_dialects(world, tmp_path):
    """The rules above are the databases' own limits, not stricter: a description of exactly
    65,535 bytes, op_kwargs 28 levels deep and an expand() list 27 levels deep (31 inside the
    stored DAG) and a --conf 31 levels deep are stored (MariaDB refuses one level more)."""
    url, eng, _ = world
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "deep.py").write_text(DEEP_AT_THE_BOUND)
    result = run(url, "dags", "sync", str(folder))
    assert result.exit_code == 0, result.output
    conf = '{"a":' + "[" * 30 + "]" * 30 + "}"
    result = run(url, "dags", "trigger", "deep_ok", "--run-id", "deep", "--conf", conf)
    assert result.exit_code == 0, result.output
    with eng.connect() as c:
        stored = c.execute(sa.text("SELECT conf FROM dag_run WHERE dag_id = 'deep_ok'")).scalar_one()
        description = c.execute(sa.text("SELECT description FROM dag WHERE dag_id = 'deep_ok'")).scalar_one()
    assert (json.loads(stored) if isinstance(stored, str) else stored) == json.loads(conf)
    assert len(description.encode()) == 65_535


def test_a_file_may_not_take_over_another_files_dag(world, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.py").write_text(BYSTANDER)
    refused_and_unchanged(world, ["dags", "sync", str(other)],
                          ["dag 'bystander' is defined by", str((world[2] / "bystander.py").relative_to("/")),
                           str((other / "x.py").relative_to("/")), "--force"])  # relative to the DAGs folder "/"


def test_sync_check_of_a_hanging_file_times_out(world, tmp_path):
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "slow.py").write_text("import time\ntime.sleep(60)\n")
    refused_and_unchanged(world, ["dags", "sync", str(folder)], ["slow.py", "more than 1 s"],
                          env={"ENGINE_DAG_IMPORT_TIMEOUT": "1"})


# ---- settings ---------------------------------------------------------------------------------
SETTING_CASES = [
    ("ENGINE_WORKER_POLL_INTERVAL", "nan", ["worker_poll_interval", "more than 0 and at most 3600"]),
    ("ENGINE_WORKER_POLL_INTERVAL", "-1", ["worker_poll_interval"]),
    ("ENGINE_WORKER_POLL_INTERVAL", "0", ["worker_poll_interval"]),
    ("ENGINE_JOB_HEARTBEAT_THRESHOLD", "inf", ["job_heartbeat_threshold", "604800"]),
    ("ENGINE_JOB_HEARTBEAT_THRESHOLD", "1e12", ["job_heartbeat_threshold"]),
    ("ENGINE_JOB_HEARTBEAT_THRESHOLD", "3", ["job_heartbeat_threshold", "more than heartbeat_interval"]),
    ("ENGINE_MAX_TIS", str(2**40), ["max_tis", "from 1 to 100000"]),
    ("ENGINE_MAX_TIS", "2**40", ["max_tis", "not an integer"]),
    ("ENGINE_MAX_TIS", "1.5", ["max_tis", "not an integer"]),
    ("ENGINE_MAX_TIS", "0", ["max_tis"]),
    ("ENGINE_SCHEDULE_BATCH", "-3", ["schedule_batch"]),
    ("ENGINE_WORKER_CONCURRENCY", "0", ["worker_concurrency"]),
    ("ENGINE_WORKER_QUEUES", ",", ["worker_queues", "at least one queue"]),
    ("ENGINE_WORKER_QUEUES", "a b", ["worker_queues", "bad queue 'a b'"]),
    ("ENGINE_MAX_REQUEUES", "-1", ["max_requeues"]),
    ("ENGINE_RESUME_PRIORITY_BOOST", str(2**31), ["resume_priority_boost", "2147483647"]),
    ("ENGINE_QUEUED_TIMEOUT", "1e300", ["queued_timeout"]),
    ("ENGINE_ORPHAN_CHECK_INTERVAL", "nan", ["orphan_check_interval"]),
    ("ENGINE_DAG_IMPORT_TIMEOUT", "0", ["dag_import_timeout"]),
    ("ENGINE_TRIGGERER_CAPACITY", "1e3", ["triggerer_capacity", "not an integer"]),
    ("ENGINE_CONFIG", "/nonexistent/engine.toml", ["config file /nonexistent/engine.toml", "does not exist"]),
]


@pytest.mark.parametrize("name, value, needles", SETTING_CASES, ids=[f"{n}={v}" for n, v, _ in SETTING_CASES])
def test_bad_setting_is_refused(world, name, value, needles):
    for command in (["config", "show"], ["tick"]):
        refused_and_unchanged(world, command, needles, env={name: value})


@pytest.mark.parametrize("toml, needles", [
    ("[engine]\nmax_tis = 1.5\n", ["max_tis", "not an integer"]),
    ("[engine]\nmax_tis = true\n", ["max_tis", "not an integer"]),
    ("[engine]\nscheduler_interval = nan\n", ["scheduler_interval"]),
    ("engine = 3\n", ["[engine] must be a table"]),
    ("[engine]\nno_such = 1\n", ["unknown setting 'no_such'"]),
    ("[engine\n", ["fix the TOML syntax"]),
], ids=["float_for_int", "bool_for_int", "nan", "not_a_table", "unknown", "syntax"])
def test_bad_config_file_is_refused(world, tmp_path, toml, needles):
    path = tmp_path / "engine.toml"
    path.write_text(toml)
    refused_and_unchanged(world, ["--config", str(path), "config", "show"], needles)


# ---- command-line arguments -------------------------------------------------------------------
CLI_CASES = [
    ("run_id_traversal", ["dags", "trigger", "bystander", "--run-id", "../../../../tmp/x/outside"], ["bad run id"]),
    ("run_id_empty", ["dags", "trigger", "bystander", "--run-id", ""], ["bad run id", "1-250"]),
    ("run_id_300", ["dags", "trigger", "bystander", "--run-id", "r" * 300], ["bad run id"]),
    ("run_id_dotdot", ["dags", "trigger", "bystander", "--run-id", ".."], ["bad run id"]),
    ("run_id_space", ["dags", "trigger", "bystander", "--run-id", "a b"], ["bad run id"]),
    ("run_id_nul", ["dags", "trigger", "bystander", "--run-id", "a\x00b"], ["bad run id"]),
    ("conf_nan", ["dags", "trigger", "bystander", "--conf", '{"x": NaN}'], ["--conf", "not valid JSON", "NaN"]),
    ("conf_infinity", ["dags", "trigger", "bystander", "--conf", '{"x": -Infinity}'], ["--conf", "Infinity"]),
    ("conf_nul", ["dags", "trigger", "bystander", "--conf", '{"x": "a\\u0000b"}'], ["--conf", "NUL"]),
    ("conf_huge_int", ["dags", "trigger", "bystander", "--conf", '{"x": 1e400}'], ["--conf"]),
    ("conf_not_object", ["dags", "trigger", "bystander", "--conf", "[1]"], ["--conf must be a JSON object"]),
    ("conf_bad_json", ["dags", "trigger", "bystander", "--conf", "{nope"], ["--conf", "not valid JSON"]),
    ("conf_32_deep", ["dags", "trigger", "bystander", "--conf", '{"a":' + "[" * 31 + "]" * 31 + "}"],
     ["--conf", "more than 31 levels"]),
    ("conf_30000_deep", ["dags", "trigger", "bystander", "--conf", '{"a":' + "[" * 30000 + "]" * 30000 + "}"],
     ["--conf", "more than 31 levels"]),
    ("conf_surrogate", ["dags", "trigger", "bystander", "--conf", '{"a": "\\ud800"}'], ["--conf", "not valid UTF-8"]),
    ("trigger_unknown_dag", ["dags", "trigger", "nope"], ["unknown DAG 'nope'"]),
    ("trigger_bad_dag_id", ["dags", "trigger", "a/b"], ["bad dag_id 'a/b'"]),
    ("pause_bad_dag_id", ["dags", "pause", "a\x00"], ["bad dag_id"]),
    ("pause_unknown_dag", ["dags", "pause", "ghost"], ["unknown DAG 'ghost'"]),
    ("drain_bad_dag_id", ["dags", "drain", ".."], ["bad dag_id"]),
    ("pool_slots_2_40", ["pools", "set", "p", str(2**40)], ["pool 'p'", "from 1 to 1000000"]),
    ("pool_slots_minus_2", ["pools", "set", "p", "-2"], ["pool 'p'", "from 1 to 1000000, or -1"]),
    # 0 slots is valid: a closed pool holds its work (tests/test_ops.py).
    ("pool_slots_million_and_one", ["pools", "set", "p", "1000001"], ["pool 'p'", "1000000"]),
    ("pool_name_empty", ["pools", "set", "", "3"], ["bad pool name ''"]),
    ("pool_name_slash", ["pools", "set", "a/b", "3"], ["bad pool name"]),
    ("pool_name_nul", ["pools", "set", "a\x00", "3"], ["bad pool name"]),
    ("pool_description_nul", ["pools", "set", "p", "3", "--description", "a\x00"], ["--description", "NUL"]),
    ("pool_description_surrogate", ["pools", "set", "p", "3", "--description", "bad\udcffbyte"],
     ["--description", "not valid UTF-8"]),
    ("pool_description_64k", ["pools", "set", "p", "3", "--description", "a" * 65536], ["--description", "65,535"]),
    ("pool_below_task", ["pools", "set", "default_pool", "1"],
     ["pool 'default_pool'", "bystander.b1", "pool_slots=2"]),
    ("pool_delete_empty", ["pools", "delete", ""], ["bad pool name"]),
    ("pool_delete_unknown", ["pools", "delete", "ghost"], ["unknown pool 'ghost'"]),
    ("event_key_empty", ["events", "send", ""], ["event key", "empty"]),
    ("event_key_nul", ["events", "send", "a\x00b"], ["event key", "NUL"]),
    ("event_key_too_long", ["events", "send", "k" * 251], ["event key", "250"]),
    ("event_payload_nan", ["events", "send", "k", "--payload", "NaN"], ["--payload", "NaN"]),
    ("event_payload_nul", ["events", "send", "k", "--payload", '"\\u0000"'], ["--payload", "NUL"]),
    ("event_payload_32_deep", ["events", "send", "k", "--payload", "[" * 32 + "]" * 32], ["--payload", "31 levels"]),
    ("event_key_surrogate", ["events", "send", "k\udcff"], ["event key"]),
    ("max_ticks_negative", ["scheduler", "--max-ticks", "-1"], ["--max-ticks"]),
    ("max_ticks_zero", ["scheduler", "--max-ticks", "0"], ["--max-ticks"]),
    ("concurrency_zero", ["worker", "--concurrency", "0"], ["--concurrency"]),
    ("queues_empty", ["worker", "--queues", ","], ["--queues"]),
    ("queues_bad", ["worker", "--queues", "a/b"], ["bad queue 'a/b'"]),
    ("capacity_zero", ["triggerer", "--capacity", "0"], ["--capacity"]),
    ("demo_timeout_nan", ["demo", "--timeout", "nan"], ["--timeout"]),
    ("downgrade_nonsense", ["db", "downgrade", "nonsense"], ["unknown revision 'nonsense'", "base, 0001"]),
    ("config_missing", ["--config", "/nonexistent.toml", "dags", "list"], ["/nonexistent.toml", "does not exist"]),
    ("sync_missing_path", ["dags", "sync", "/nonexistent/dags"], ["/nonexistent/dags", "does not exist"]),
]


@pytest.mark.parametrize("case_id, args, needles", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_bad_command_argument_is_refused(world, case_id, args, needles):
    refused_and_unchanged(world, args, needles)


def test_upgrade_of_a_database_migrated_by_a_newer_release_is_refused(world):
    url, eng, _ = world
    with eng.begin() as conn:
        current = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    try:
        for args in (["db", "upgrade"], ["dags", "list"], ["db", "downgrade", "0003"]):
            refused_and_unchanged(world, args, ["revision 9999", "newer release"])
    finally:
        with eng.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": current})


# ---- after every refusal: the bystander still runs ---------------------------------------------
def test_zz_bystander_still_runs_after_every_refusal(world):
    """Runs last in the module (pytest keeps file order): the shared database took every case above."""
    url, eng, _ = world
    assert run(url, "dags", "trigger", "bystander", "--run-id", "after_all").exit_code == 0
    for _ in range(10):
        assert run(url, "tick").exit_code == 0
        assert run(url, "worker", "--burst").exit_code == 0
        with eng.connect() as conn:
            state = conn.execute(sa.text("SELECT state FROM dag_run WHERE run_id = 'after_all'")).scalar_one()
        if state == "success":
            break
    assert state == "success"
    listing = run(url, "dags", "list")
    assert listing.exit_code == 0 and "bystander" in listing.output
    assert json.loads(run(url, "status", "--json").output)["dag errors"] == []
