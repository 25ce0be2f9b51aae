"""Pure-Python tests for the DAG authoring API and the DAG file loader (no database)."""
import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from engine.dag import DAG, BashTask, PythonTask, mapped_kwargs, normalise_schedule, serialize_dag
from engine.dagbag import load_dags
from engine.errors import EngineError

HERE = Path(__file__).parent
GOOD = HERE / "dags_good"
BAD = HERE / "dags_bad"


def fails(fn, *needles):
    """Run fn, expect EngineError with a one-line message containing every needle; return the message."""
    with pytest.raises(EngineError) as info:
        fn()
    msg = str(info.value)
    assert "\n" not in msg, msg
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"
    return msg


def by_id(ser):
    return {t["task_id"]: t for t in ser["tasks"]}


# ---- the example from the docs ----------------------------------------------------------------

def test_example_dag_serializes():
    with DAG("etl", schedule="*/10 * * * *", start_date="2026-01-01", catchup=False,
             max_active_runs=2, max_active_tasks=8) as dag:
        extract = BashTask("extract", bash_command="./extract.sh", pool="warehouse",
                           pool_slots=2, priority_weight=10, retries=3, retry_delay=30)
        load = PythonTask("load", python_callable="etl.jobs:load", op_kwargs={"table": "t"},
                          max_active_tis_per_dag=4)
        shard = PythonTask("shard", python_callable="etl.jobs:shard").expand(n=[1, 2, 3])
        assert extract >> [load, shard] == [load, shard]
    ser = serialize_dag(dag)
    assert [t["task_id"] for t in ser["tasks"]] == ["extract", "load", "shard"]
    assert ser["schedule"] == "*/10 * * * *"
    assert ser["start_date"] == "2026-01-01T00:00:00+00:00"
    assert (ser["max_active_runs"], ser["max_active_tasks"], ser["catchup"]) == (2, 8, False)
    t = by_id(ser)
    assert t["extract"]["kind"] == "bash" and t["extract"]["python_callable"] is None
    assert (t["extract"]["pool"], t["extract"]["pool_slots"], t["extract"]["retries"]) == ("warehouse", 2, 3)
    assert t["extract"]["retry_delay"] == 30.0 and isinstance(t["extract"]["retry_delay"], float)
    assert t["extract"]["priority_weight"] == 12  # 10 + load (1) + shard (1)
    assert t["load"] == {**t["load"], "kind": "python", "op_kwargs": {"table": "t"}, "bash_command": None,
                         "max_active_tis_per_dag": 4, "upstream": ["extract"], "expand": None,
                         "pool": "default_pool", "queue": "default", "executor": "default",
                         "trigger_rule": "all_success", "weight_rule": "downstream"}
    assert t["shard"]["expand"] == {"n": [1, 2, 3]}
    json.dumps(ser)  # plain JSON


def test_defaults_and_timedelta_args():
    dag = DAG("d")
    t = BashTask("t", bash_command="true", dag=dag, retry_delay=timedelta(minutes=2),
                 max_retry_delay=timedelta(hours=1), execution_timeout=90)
    s = by_id(serialize_dag(dag))["t"]
    assert (s["retry_delay"], s["max_retry_delay"], s["execution_timeout"]) == (120.0, 3600.0, 90.0)
    assert (s["retries"], s["retry_exponential_backoff"], s["max_active_tis_per_dagrun"]) == (0, False, None)
    ser = serialize_dag(dag)
    assert ser["schedule"] is None and ser["start_date"] is None and ser["max_active_runs"] == 16
    assert t.dag is dag


# ---- dependencies -----------------------------------------------------------------------------

def test_dependency_operators_and_lists():
    with DAG("deps") as dag:
        a, b, c, d, e = (BashTask(x, bash_command="true") for x in "abcde")
        assert (a >> [b, c]) == [b, c]
        assert ([b, c] >> d) is d
        assert (e << d) is d
        assert ([a] << e) is e   # e >> a would be a cycle; only build it, never serialize
    assert a.downstream_ids == {"b", "c"} and d.upstream_ids == {"b", "c"} and e.upstream_ids == {"d"}
    assert e.downstream_ids == {"a"}
    fails(lambda: serialize_dag(dag), "dag 'deps'", "cycle a -> ", "remove one of these dependencies")


def test_set_upstream_downstream_and_topological_order_ties_by_task_id():
    with DAG("topo") as dag:
        z, y, x, w = (BashTask(n, bash_command="true") for n in "zyxw")
        z.set_downstream(y)
        x.set_upstream([z])
        w.set_upstream(x)
    order = [t["task_id"] for t in serialize_dag(dag)["tasks"]]
    assert order == ["z", "x", "w", "y"]
    assert by_id(serialize_dag(dag))["w"]["upstream"] == ["x"]


def test_cycle_names_tasks():
    with DAG("x") as dag:
        a, b = BashTask("a", bash_command="true"), BashTask("b", bash_command="true")
        BashTask("c", bash_command="true").set_upstream(b)
        a >> b >> a
    assert fails(lambda: serialize_dag(dag)) == "dag 'x': cycle a -> b -> a; remove one of these dependencies"


def test_self_dependency_is_a_cycle():
    with DAG("selfie") as dag:
        a = BashTask("a", bash_command="true")
        a >> a
    fails(lambda: serialize_dag(dag), "cycle a -> a")


def test_dependencies_across_dags_rejected():
    with DAG("one"):
        a = BashTask("a", bash_command="true")
    with DAG("two"):
        b = BashTask("b", bash_command="true")
    fails(lambda: a >> b, "dag 'one' task 'a'", "dag 'two'", "inside one DAG")
    fails(lambda: [b] >> a, "task 'b'", "dag 'two'")


# ---- priority weights ---------------------------------------------------------------------------

def diamond(rule):
    #     a(1)
    #    /    \
    #  b(2)  c(3)
    #    \    /
    #     d(4)
    with DAG(f"diamond_{rule}") as dag:
        a, b, c, d = (BashTask(n, bash_command="true", priority_weight=w, weight_rule=rule)
                      for n, w in zip("abcd", (1, 2, 3, 4)))
        a >> [b, c] >> d
    return {k: v["priority_weight"] for k, v in by_id(serialize_dag(dag)).items()}


def test_weight_rules_on_diamond():
    assert diamond("downstream") == {"a": 10, "b": 6, "c": 7, "d": 4}   # d counted once for a
    assert diamond("upstream") == {"a": 1, "b": 3, "c": 4, "d": 10}     # a counted once for d
    assert diamond("absolute") == {"a": 1, "b": 2, "c": 3, "d": 4}


def test_weight_rule_is_per_task():
    with DAG("mixed") as dag:
        a = BashTask("a", bash_command="true", priority_weight=5, weight_rule="absolute")
        b = BashTask("b", bash_command="true", priority_weight=7)
        c = BashTask("c", bash_command="true", priority_weight=1, weight_rule="upstream")
        a >> b >> c
    assert {k: v["priority_weight"] for k, v in by_id(serialize_dag(dag)).items()} == {"a": 5, "b": 8, "c": 13}


# ---- expand -------------------------------------------------------------------------------------

def test_expand_python_instances():
    with DAG("m") as dag:
        t = PythonTask("t", python_callable="pkg.mod:fn", op_kwargs={"fixed": 1})
        assert t.expand(x=[1, 2, 3], y=["a", "b", "c"]) is t
    assert by_id(serialize_dag(dag))["t"]["expand"] == {"x": [1, 2, 3], "y": ["a", "b", "c"]}
    assert mapped_kwargs(t.expand_args) == [{"x": 1, "y": "a"}, {"x": 2, "y": "b"}, {"x": 3, "y": "c"}]
    assert mapped_kwargs(None) is None


def test_expand_bash_keys():
    with DAG("mb") as dag:
        t = BashTask("t", bash_command="echo default", env={"A": "1"})
        t.expand(bash_command=["echo 1", "echo 2"], env=[{"B": "1"}, {"B": "2"}])
        u = BashTask("u", bash_command="true")
    s = by_id(serialize_dag(dag))["t"]
    assert s["env"] == {"A": "1"} and s["expand"]["env"] == [{"B": "1"}, {"B": "2"}]
    fails(lambda: u.expand(table=["a"]), "dag 'mb' task 'u'", "'table'", "only bash_command and env")
    fails(lambda: BashTask("v", bash_command="x", dag=dag).expand(env=["A=1"]), "task 'v'", "env")


def test_expand_errors():
    with DAG("me"):
        fails(lambda: PythonTask("a", python_callable="m:f").expand(x=[1, 2], y=[1]),
              "task 'a'", "different lengths", "x=2, y=1")
        fails(lambda: PythonTask("b", python_callable="m:f").expand(x=[]), "task 'b'", "non-empty list")
        fails(lambda: PythonTask("c", python_callable="m:f").expand(x=5), "task 'c'", "non-empty list")
        fails(lambda: PythonTask("d", python_callable="m:f").expand(x=[object()]), "task 'd'", "JSON")
        fails(lambda: PythonTask("e", python_callable="m:f", op_kwargs={"x": 1}).expand(x=[1]),
              "task 'e'", "op_kwargs")
        f = PythonTask("f", python_callable="m:f").expand(x=[1])
        fails(lambda: f.expand(y=[1]), "task 'f'", "expand() once")


# ---- schedules ----------------------------------------------------------------------------------

@pytest.mark.parametrize("given, expected", [
    (None, None),
    ("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
    ("@weekly", "0 0 * * 0"), ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"),
    ("*/10 * * * *", "*/10 * * * *"),
    ("0 9 * jan-MAR Mon-fri", "0 9 * 1-3 1-5"),
    ("30 2 1,15 DEC SUN", "30 2 1,15 12 0"),
    ("0 0 * * 7", "0 0 * * 0"),
    ("0 0 * * 5-7", "0 0 * * 0,5,6"),
    ("0 0 * * 1,7", "0 0 * * 0,1"),
    ("5/15 * * * *", "5-59/15 * * * *"),
    ("  0   0  *  *  * ", "0 0 * * *"),
])
def test_schedule_normalisation(given, expected):
    assert normalise_schedule(given) == expected
    if given:
        assert DAG("s", schedule=given, start_date="2026-01-01").schedule == expected


@pytest.mark.parametrize("cron, needle", [
    ("0 0 L * *", "'L'"), ("0 0 15W * *", "'W'"), ("0 0 * * 1#2", "1#2"), ("0 0 ? * *", "'?'"),
    ("0 0 * * * *", "exactly 5 fields"), ("0 0 * *", "exactly 5 fields"), ("61 * * * *", "61"),
    ("0 0 * MON *", "'MON'"), ("0 0 * * JAN", "'JAN'"), ("0 0 * 12-1 *", "12-1"), ("*/0 * * * *", "*/0"),
    ("@fortnightly", "preset"), ("0 0 * * 8", "8"), ("every day", "every"),
])
def test_bad_cron(cron, needle):
    fails(lambda: DAG("c", schedule=cron, start_date="2026-01-01"), "dag 'c'", needle)


def test_once_and_missing_start_date():
    fails(lambda: DAG("o", schedule="@once", start_date="2026-01-01"), "dag 'o'", "@once", "schedule=None")
    fails(lambda: DAG("n", schedule="@daily"), "dag 'n'", "start_date is required")
    fails(lambda: DAG("t", schedule=5, start_date="2026-01-01"), "dag 't'", "schedule")


@pytest.mark.parametrize("given, expected", [
    ("2026-01-01", "2026-01-01T00:00:00+00:00"),
    ("2026-01-01T06:30:00", "2026-01-01T06:30:00+00:00"),
    ("2026-01-01T06:30:00+02:00", "2026-01-01T04:30:00+00:00"),
    (date(2026, 1, 2), "2026-01-02T00:00:00+00:00"),
    (datetime(2026, 1, 3, 12), "2026-01-03T12:00:00+00:00"),
    (datetime(2026, 1, 3, 12, tzinfo=timezone(timedelta(hours=-1))), "2026-01-03T13:00:00+00:00"),
])
def test_start_date(given, expected):
    assert DAG("sd", schedule="@daily", start_date=given).start_date == expected


def test_bad_start_date():
    fails(lambda: DAG("sd", start_date="yesterday"), "dag 'sd'", "start_date", "ISO")
    fails(lambda: DAG("sd", start_date=20260101), "dag 'sd'", "start_date")


# ---- validation of arguments --------------------------------------------------------------------

def test_task_outside_dag():
    fails(lambda: BashTask("lonely", bash_command="true"), "'lonely'", "with DAG", "dag=")


def test_duplicate_task_id():
    with DAG("dup"):
        BashTask("a", bash_command="true")
        fails(lambda: BashTask("a", bash_command="true"), "dag 'dup'", "duplicate task_id 'a'")


def test_failed_task_does_not_join_dag():
    with DAG("half") as dag:
        fails(lambda: BashTask("a", bash_command=""), "task 'a'", "bash_command")
        BashTask("a", bash_command="true")  # the failed attempt left nothing behind
    assert list(dag.tasks) == ["a"]


@pytest.mark.parametrize("bad_id", ["", "has space", "slash/", "x" * 251, "tab\t", "ünï", 5, None, "a\n"])
def test_bad_ids(bad_id):
    fails(lambda: DAG(bad_id), "bad dag_id", "A-Z a-z 0-9 _ . -")
    with DAG("ids"):
        fails(lambda: BashTask(bad_id, bash_command="true"), "dag 'ids'", "bad task_id")


def test_good_ids():
    with DAG("My.dag-1_x"):
        BashTask("t." * 100, bash_command="true")


@pytest.mark.parametrize("kwargs, needle", [
    ({"pool_slots": 0}, "pool_slots"), ({"pool_slots": 1.5}, "pool_slots"),
    ({"priority_weight": 1.5}, "priority_weight"), ({"priority_weight": "high"}, "priority_weight"),
    ({"priority_weight": True}, "priority_weight"),
    ({"weight_rule": "sideways"}, "weight_rule"), ({"trigger_rule": "all_good"}, "trigger_rule"),
    ({"retries": -1}, "retries"), ({"retry_delay": -5}, "retry_delay"),
    ({"retry_delay": "5m"}, "retry_delay"), ({"max_retry_delay": -1}, "max_retry_delay"),
    ({"execution_timeout": 0}, "execution_timeout"), ({"execution_timeout": timedelta(0)}, "execution_timeout"),
    ({"max_active_tis_per_dag": 0}, "max_active_tis_per_dag"),
    ({"max_active_tis_per_dagrun": -1}, "max_active_tis_per_dagrun"),
    ({"pool": ""}, "pool"), ({"queue": None}, "queue"), ({"executor": 3}, "executor"),
])
def test_bad_task_args(kwargs, needle):
    with DAG("args"):
        fails(lambda: BashTask("t", bash_command="true", **kwargs), "dag 'args' task 't'", needle)


@pytest.mark.parametrize("kwargs, needle", [
    ({"max_active_runs": 0}, "max_active_runs"), ({"max_active_tasks": -2}, "max_active_tasks"),
    ({"max_active_runs": "2"}, "max_active_runs"), ({"tags": "x"}, "tags"), ({"description": None}, "description"),
])
def test_bad_dag_args(kwargs, needle):
    fails(lambda: DAG("dargs", **kwargs), "dag 'dargs'", needle)


def test_none_limits_allowed():
    dag = DAG("nolimits", max_active_runs=None, max_active_tasks=None)
    BashTask("t", bash_command="true", dag=dag, max_active_tis_per_dag=None, max_active_tis_per_dagrun=None)
    assert serialize_dag(dag)["max_active_runs"] is None


def test_all_trigger_rules_accepted():
    with DAG("rules") as dag:
        for rule in ("all_success", "all_failed", "all_done", "one_success", "one_failed",
                     "none_failed", "none_skipped", "always"):
            BashTask(rule, bash_command="true", trigger_rule=rule)
    assert {t["task_id"]: t["trigger_rule"] for t in serialize_dag(dag)["tasks"]} == {r: r for r in dag.tasks}


def a_function():
    pass


def test_python_callable_checks():
    with DAG("py"):
        msg = fails(lambda: PythonTask("f", python_callable=a_function), "task 'f'", "'module.path:function'")
        assert f"'{__name__}:a_function'" in msg
        fails(lambda: PythonTask("g", python_callable="no_colon"), "task 'g'", "module.path:function")
        fails(lambda: PythonTask("h", python_callable="a:b:c"), "task 'h'", "python_callable")
        fails(lambda: PythonTask("i", python_callable="m:f", op_kwargs={"x": {1, 2}}), "task 'i'", "JSON")
        fails(lambda: PythonTask("j", python_callable="m:f", op_kwargs=[1]), "task 'j'", "op_kwargs")
        fails(lambda: BashTask("k", bash_command="true", env={"A": 1}), "task 'k'", "env")
        assert PythonTask("ok", python_callable="pkg.sub_mod:run_2").python_callable == "pkg.sub_mod:run_2"


def test_nested_context_attaches_to_innermost():
    with DAG("outer") as outer:
        with DAG("inner") as inner:
            i = BashTask("i", bash_command="true")
        o = BashTask("o", bash_command="true")
        x = BashTask("x", bash_command="true", dag=inner)
    assert (i.dag, o.dag, x.dag) == (inner, outer, inner)


# ---- loading files ------------------------------------------------------------------------------

def test_load_good_folder():
    dags = load_dags(GOOD)
    assert [d["dag_id"] for d in dags] == ["etl", "generated_0", "generated_1"]
    etl = dags[0]
    assert etl["fileloc"] == str((GOOD / "etl.py").resolve())
    assert etl["tags"] == ["demo"]
    t = by_id(etl)
    assert t["extract"]["retries"] == 2 and t["extract"]["retry_delay"] == 60.0   # from the helper module
    assert t["shard"]["expand"] == {"table": ["orders", "customers"]}
    assert dags[1]["fileloc"].endswith("sub/factory.py")
    assert load_dags(str(GOOD / "etl.py"))[0]["dag_id"] == "etl"   # a single file, given as str
    assert load_dags(GOOD) == dags                                  # repeatable


def test_load_missing_path(tmp_path):
    fails(lambda: load_dags(tmp_path / "nope"), "nope", "does not exist")


def test_load_file_without_dag():
    assert load_dags(GOOD / "common.py") == []


def test_syntax_error_is_one_line():
    msg = fails(lambda: load_dags(BAD / "syntax_error.py"), "DAG file ", "syntax_error.py", "SyntaxError",
                "fix the file and run `engine dags sync` again")
    assert msg.startswith("DAG file ")


def test_import_error_is_one_line():
    fails(lambda: load_dags(BAD / "import_error.py"), "import_error.py", "ModuleNotFoundError",
          "no_such_module_for_engine_tests", "engine dags sync")


def test_multiline_exception_collapsed(tmp_path):
    (tmp_path / "multi.py").write_text('raise ValueError("line one\\nline two")\n')
    fails(lambda: load_dags(tmp_path), "multi.py", "ValueError: line one line two")


@pytest.mark.parametrize("name, needles", [
    ("duplicate_task_id.py", ["duplicate_task_id.py", "dag 'dup_tasks'", "duplicate task_id 'a'"]),
    ("cycle.py", ["cycle.py", "dag 'cyclic': cycle a -> b -> c -> a"]),
    ("bad_cron.py", ["bad_cron.py", "dag 'bad_cron'", "'L'"]),
])
def test_bad_files(name, needles):
    fails(lambda: load_dags(BAD / name), *needles)


def test_duplicate_dag_id_across_files():
    fails(lambda: load_dags(BAD / "dup_dag_id"), "dag 'same_id'", "one.py", "two.py", "rename one")


def test_load_is_all_or_nothing(tmp_path):
    (tmp_path / "a_good.py").write_text("from engine.dag import DAG\nDAG('fine')\n")
    (tmp_path / "b_bad.py").write_text("from engine.dag import DAG\nDAG('bad id')\n")
    fails(lambda: load_dags(tmp_path), "b_bad.py", "bad dag_id")


def test_helper_modules_are_reloaded_between_syncs(tmp_path):
    (tmp_path / "helper.py").write_text("CMD = 'echo 1'\n")
    (tmp_path / "d.py").write_text("from helper import CMD\nfrom engine.dag import DAG, BashTask\n"
                                   "with DAG('h'):\n    BashTask('t', bash_command=CMD)\n")
    assert load_dags(tmp_path / "d.py")[0]["tasks"][0]["bash_command"] == "echo 1"
    (tmp_path / "helper.py").write_text("CMD = 'echo 2'\n")
    assert load_dags(tmp_path / "d.py")[0]["tasks"][0]["bash_command"] == "echo 2"
