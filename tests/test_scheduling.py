"""schedule_tis, create_dag_runs, finish_ti: trigger rules, retries, mapping, runs, cron."""
from datetime import datetime, timedelta, timezone

import pytest

from tests.helpers import (claim, drive, finish, run_states, sql, sync_source, tick, ti_states,
                           trigger)

OK, FAIL, SKIP = 0, 1, 99

# Two upstreams with the given outcomes, then `t` with the rule: what state does `t` reach?
RULE_CASES = [
    ("all_success", (OK, OK), "success"),
    ("all_success", (OK, FAIL), "upstream_failed"),
    ("all_success", (OK, SKIP), "skipped"),
    ("all_failed", (FAIL, FAIL), "success"),
    ("all_failed", (FAIL, OK), "skipped"),
    ("all_done", (FAIL, SKIP), "success"),
    ("one_success", (FAIL, OK), "success"),
    ("one_success", (FAIL, FAIL), "upstream_failed"),
    ("one_success", (SKIP, SKIP), "skipped"),
    ("one_failed", (OK, FAIL), "success"),
    ("one_failed", (OK, OK), "skipped"),
    ("none_failed", (OK, SKIP), "success"),
    ("none_failed", (OK, FAIL), "upstream_failed"),
    ("none_skipped", (OK, FAIL), "success"),
    ("none_skipped", (OK, SKIP), "skipped"),
    ("always", (FAIL, FAIL), "success"),
]


@pytest.mark.parametrize("rule,outcomes,expected", RULE_CASES)
def test_trigger_rule(eng, cfg, tmp_path, rule, outcomes, expected):
    sync_source(eng, tmp_path / "dags", f"""
        with DAG("rules"):
            a = BashTask("a", bash_command="true")
            b = BashTask("b", bash_command="true")
            t = BashTask("t", bash_command="true", trigger_rule="{rule}")
            [a, b] >> t
    """)
    trigger(eng, "rules")
    drive(eng, cfg, {"a": outcomes[0], "b": outcomes[1]})
    assert ti_states(eng)["t"] == expected
    # The run fails when its leaf failed or is upstream_failed, else succeeds.
    assert run_states(eng, "rules") == ["failed" if expected == "upstream_failed" else "success"]


def test_skip_and_upstream_failed_propagate_down_a_chain_in_one_tick(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", """
        with DAG("chain"):
            a = BashTask("a", bash_command="true")
            b = BashTask("b", bash_command="true")
            c = BashTask("c", bash_command="true")
            d = BashTask("d", bash_command="true", trigger_rule="all_done")
            a >> b >> c >> d
    """)
    trigger(eng, "chain")
    tick(eng, cfg)
    (ti,) = claim(eng)
    finish(eng, ti, FAIL)
    summary = tick(eng, cfg)
    assert ti_states(eng) == {"a": "failed", "b": "upstream_failed", "c": "upstream_failed", "d": "queued"}
    assert summary["tis_upstream_failed"] == 2


def test_retry_waits_for_its_delay_with_exponential_backoff(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", """
        with DAG("retry"):
            BashTask("t", bash_command="false", retries=3, retry_delay=10,
                     retry_exponential_backoff=True, max_retry_delay=30)
    """)
    t0 = datetime(2026, 6, 1, tzinfo=timezone.utc)
    trigger(eng, "retry", now=t0)
    tick(eng, cfg, now=t0)
    delays = []
    now = t0
    for expected_delay in (10, 20, 30):  # 10 * 2^(try-1), capped at 30
        (ti,) = claim(eng, now=now)
        assert finish(eng, ti, FAIL, now=now) == "up_for_retry"
        (retry_at,) = sql(eng, "SELECT retry_at FROM task_instance")[0]
        delays.append((retry_at - now).total_seconds())
        tick(eng, cfg, now=retry_at - timedelta(seconds=1))
        assert ti_states(eng)["t"] == "up_for_retry"  # not before its time
        now = retry_at
        tick(eng, cfg, now=now)
        assert ti_states(eng)["t"] == "queued"
    assert delays == [10, 20, 30]
    (ti,) = claim(eng, now=now)
    assert ti.try_number == 4
    assert finish(eng, ti, FAIL, now=now) == "failed"
    history = sql(eng, "SELECT try_number, state FROM task_instance_history ORDER BY id")
    assert [(h.try_number, h.state) for h in history] == [(1, "failed"), (2, "failed"), (3, "failed"), (4, "failed")]


def test_stale_finish_report_changes_nothing(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", """
        with DAG("cas"):
            BashTask("t", bash_command="true", retries=1, retry_delay=0)
    """)
    trigger(eng, "cas")
    tick(eng, cfg)
    (ti,) = claim(eng)
    assert finish(eng, ti, FAIL) == "up_for_retry"
    assert finish(eng, ti, OK) is None  # the same try reported again: ignored
    tick(eng, cfg)
    (ti2,) = claim(eng)
    assert ti2.try_number == 2
    assert finish(eng, ti, OK) is None  # a late report of try 1 does not touch try 2
    assert ti_states(eng)["t"] == "running"


def test_mapped_task_has_one_ti_per_value(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", """
        with DAG("mapped"):
            a = BashTask("a", bash_command="true")
            m = PythonTask("m", python_callable="x:y", op_kwargs={"k": 1}).expand(n=[10, 20, 30])
            z = BashTask("z", bash_command="true")
            a >> m >> z
    """)
    trigger(eng, "mapped")
    tick(eng, cfg)
    finish(eng, claim(eng)[0], OK)
    tick(eng, cfg)
    rows = claim(eng)
    assert sorted((r.task_id, r.map_index, r.map_args["n"]) for r in rows) == [("m", 0, 10), ("m", 1, 20), ("m", 2, 30)]
    finish(eng, rows[0], OK)
    finish(eng, rows[1], OK)
    tick(eng, cfg)
    assert ti_states(eng)["z"] == "none"  # waits for every map index
    finish(eng, rows[2], OK)
    drive(eng, cfg)
    assert run_states(eng, "mapped") == ["success"]


def test_max_active_runs_starts_queued_runs_in_order(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", """
        with DAG("mar", max_active_runs=1):
            BashTask("t", bash_command="true")
    """)
    for i in range(3):
        trigger(eng, "mar", run_id=f"r{i}")
    tick(eng, cfg)
    assert run_states(eng, "mar") == ["running", "queued", "queued"]
    drive(eng, cfg)
    assert run_states(eng, "mar") == ["success", "success", "success"]


def test_a_run_started_after_another_finished_starts_after_its_end_on_paper(eng, cfg, tmp_path):
    """create_dag_runs_v4 stamps a started run with the moment it decided, not its transaction's
    start: a pass whose transaction began before another scheduler finished the DAG's only
    running run must not start the next run before that run's end_date (max_active_runs=1
    would be exceeded on paper; v3 did that on PostgreSQL)."""
    import sqlalchemy as sa

    from engine import db

    sync_source(eng, tmp_path / "dags", """
        with DAG("mar1", max_active_runs=1):
            BashTask("t", bash_command="true")
    """)
    for i in range(2):
        trigger(eng, "mar1", run_id=f"r{i}")
    tick(eng, cfg)
    assert run_states(eng, "mar1") == ["running", "queued"]
    with eng.connect() as late:
        late.execute(sa.text("SELECT 1"))  # its transaction (and PostgreSQL's now()) starts here
        with eng.begin() as other:  # another scheduler finishes r0, after that start
            other.execute(sa.text("UPDATE dag_run SET state = 'success', end_date = CURRENT_TIMESTAMP(6) "
                                  "WHERE dag_id = 'mar1' AND run_id = 'r0'"))
        assert db.run(late, "create_dag_runs", now=None).one().runs_started == 1
        late.commit()
    with eng.connect() as c:
        ended, started = c.execute(sa.text(
            "SELECT (SELECT end_date FROM dag_run WHERE dag_id = 'mar1' AND run_id = 'r0'), "
            "(SELECT start_date FROM dag_run WHERE dag_id = 'mar1' AND run_id = 'r1')")).one()
    assert started >= ended, (started, ended)


def test_paused_dag_starts_nothing_new_and_running_work_finishes(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", """
        with DAG("p"):
            a = BashTask("a", bash_command="true")
            b = BashTask("b", bash_command="true")
            a >> b
    """)
    trigger(eng, "p")
    tick(eng, cfg)
    (ti,) = claim(eng)
    sql(eng, "UPDATE dag SET is_paused = true")
    trigger(eng, "p", run_id="second")
    finish(eng, ti, OK)  # the running TI still reports
    tick(eng, cfg)
    assert ti_states(eng) == {"a": "success", "b": "scheduled"}  # scheduled, but not queued
    assert run_states(eng, "p") == ["running", "queued"]
    sql(eng, "UPDATE dag SET is_paused = false")
    drive(eng, cfg)
    assert run_states(eng, "p") == ["success", "success"]


def test_cron_catchup_creates_every_missed_interval(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", """
        with DAG("hourly", schedule="0 * * * *", start_date="2026-03-01T00:00", catchup=True, max_active_runs=10):
            BashTask("t", bash_command="true")
    """)
    now = datetime(2026, 3, 1, 3, 30, tzinfo=timezone.utc)
    tick(eng, cfg, now=now)
    runs = sql(eng, "SELECT run_id, data_interval_start, data_interval_end FROM dag_run ORDER BY logical_date")
    assert [r.run_id for r in runs] == ["scheduled__2026-03-01T00:00:00+00:00",
                                        "scheduled__2026-03-01T01:00:00+00:00",
                                        "scheduled__2026-03-01T02:00:00+00:00"]
    assert runs[0].data_interval_end == datetime(2026, 3, 1, 1, tzinfo=timezone.utc)
    tick(eng, cfg, now=now)  # nothing new is due: no duplicate
    assert len(sql(eng, "SELECT id FROM dag_run")) == 3
    tick(eng, cfg, now=now + timedelta(hours=1))
    assert len(sql(eng, "SELECT id FROM dag_run")) == 4


def test_cron_without_catchup_runs_only_the_latest_interval(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", """
        with DAG("hourly", schedule="0 * * * *", start_date="2026-01-01", catchup=False):
            BashTask("t", bash_command="true")
    """)
    tick(eng, cfg, now=datetime(2026, 3, 1, 3, 30, tzinfo=timezone.utc))
    assert [r.run_id for r in sql(eng, "SELECT run_id FROM dag_run")] == ["scheduled__2026-03-01T02:00:00+00:00"]


def test_catchup_respects_max_active_runs(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", """
        with DAG("daily", schedule="@daily", start_date="2026-01-01", catchup=True, max_active_runs=2):
            BashTask("t", bash_command="true")
    """)
    now = datetime(2026, 1, 11, tzinfo=timezone.utc)
    tick(eng, cfg, now=now)
    assert run_states(eng, "daily") == ["running", "running"]
    drive(eng, cfg, now=now)
    assert run_states(eng, "daily") == ["success"] * 10  # Jan 1..10, each once


def test_dag_run_finishes_and_leaf_decides_state(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", """
        with DAG("leaf"):
            a = BashTask("a", bash_command="true")
            b = BashTask("b", bash_command="true", trigger_rule="all_done")
            a >> b
    """)
    trigger(eng, "leaf")
    drive(eng, cfg, {"a": FAIL})
    assert ti_states(eng) == {"a": "failed", "b": "success"}
    assert run_states(eng, "leaf") == ["success"]  # Airflow: the leaves decide


def test_tis_of_a_removed_task_become_removed_and_the_run_finishes(eng, cfg, tmp_path):
    """A sync that drops tasks: their TIs in none / scheduled / up_for_retry become `removed`
    (never queued), TIs already queued or running finish, and the run succeeds."""
    folder = tmp_path / "dags"
    sync_source(eng, folder, """
        with DAG("shrink"):
            a = BashTask("a", bash_command="true")
            b = BashTask("b", bash_command="true")
            c = BashTask("c", bash_command="false", retries=1, retry_delay=3600)
            d = BashTask("d", bash_command="true", max_active_tis_per_dagrun=1).expand(bash_command=["true", "true"])
            a >> b
    """)
    trigger(eng, "shrink")
    tick(eng, cfg)
    running = {(ti.task_id, ti.map_index): ti for ti in claim(eng)}
    assert sorted(running) == [("a", -1), ("c", -1), ("d", 0)]
    assert finish(eng, running[("c", -1)], FAIL) == "up_for_retry"
    assert ti_states(eng) == {"a": "running", "b": "none", "c": "up_for_retry", "d[0]": "running", "d[1]": "scheduled"}
    sync_source(eng, folder, """
        with DAG("shrink"):
            a = BashTask("a", bash_command="true")
    """)
    reasons = dict(sql(eng, "SELECT task_id, reason FROM pending_reasons"))
    assert reasons == {"d": "task removed"}  # before schedule_tis marks it: never queued either
    tick(eng, cfg)
    assert ti_states(eng) == {"a": "running", "b": "removed", "c": "removed", "d[0]": "running", "d[1]": "removed"}
    finish(eng, running[("a", -1)], OK)
    finish(eng, running[("d", 0)], OK)
    drive(eng, cfg)
    assert ti_states(eng) == {"a": "success", "b": "removed", "c": "removed", "d[0]": "success", "d[1]": "removed"}
    assert run_states(eng, "shrink") == ["success"]  # removed is done, and not a failure
    (recent,) = sql(eng, "SELECT tis, success, failed, unfinished, removed FROM recent_runs")
    assert tuple(recent) == (5, 2, 0, 0, 3)


POISON = "test_poisoned_run"


def _dag_errors(eng) -> dict:
    return {r.dag_id: (r.error_step, r.error, r.error_at is not None)
            for r in sql(eng, "SELECT dag_id, error_step, error, error_at FROM dag ORDER BY dag_id")}


def test_one_runs_bad_data_is_recorded_against_its_dag_and_other_runs_go_on(eng, cfg, tmp_path):
    """A run whose TIs cannot be written (a CHECK constraint stands in for bad data) fails alone:
    its DAG gets the error, every other run, of its DAG too, moves on; fixed, the error clears."""
    sync_source(eng, tmp_path / "dags", """
        for dag_id in ("bad", "good"):
            with DAG(dag_id, max_active_runs=4):
                BashTask("a", bash_command="true") >> BashTask("b", bash_command="true")
    """)
    trigger(eng, "good", run_id="g1")
    trigger(eng, "bad", run_id="poisoned")
    trigger(eng, "bad", run_id="fine")
    sql(eng, f"ALTER TABLE task_instance ADD CONSTRAINT {POISON} CHECK (run_id <> 'poisoned' OR state <> 'scheduled')")
    tick(eng, cfg)
    states = {(r.run_id, r.task_id): r.state for r in sql(eng, "SELECT run_id, task_id, state FROM task_instance")}
    assert states == {("g1", "a"): "queued", ("g1", "b"): "none", ("fine", "a"): "queued", ("fine", "b"): "none",
                      ("poisoned", "a"): "none", ("poisoned", "b"): "none"}
    errors = _dag_errors(eng)
    assert errors["good"] == (None, None, False)
    step, error, stamped = errors["bad"]
    assert step == "schedule_tis" and stamped
    assert error.startswith("run poisoned: ") and POISON in error and "\n" not in error

    drive(eng, cfg)  # the other runs finish, call after call, while the poisoned one still fails
    assert sorted(r.run_id for r in sql(eng, "SELECT run_id FROM dag_run WHERE state = 'success'")) == \
        ["fine", "g1"]
    assert run_states(eng, "bad") == ["running", "success"]
    assert _dag_errors(eng)["bad"][0] == "schedule_tis"

    sql(eng, f"ALTER TABLE task_instance DROP CONSTRAINT {POISON}")  # the data is fixed
    drive(eng, cfg)
    assert run_states(eng, "bad") == ["success", "success"]
    assert _dag_errors(eng)["bad"] == (None, None, False)  # cleared by the step that recorded it
