"""No value a DAG, task or TI holds makes a procedure fail for everyone.

Values the lead refuses at `dags sync` (retry_delay=1e300, start_date in year 9999, ...) can
still be in the database: rows written before the fix, or by hand from a SQL console. Each test
stores such a value by hand, then checks on both dialects that the step that used to fail for
everybody goes on: the bad DAG/TI gets a bounded result or a recorded error, every other DAG
keeps getting runs, and `engine tick` does not raise.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from engine import db
from engine.validate import INT32_MAX, MAX_SECONDS
from tests.helpers import sql, sync_source, tick, trigger


def register(eng, kind: str = "worker") -> int:
    with db.connect(eng) as conn:
        return db.run(conn, "register_job", kind=kind, hostname="h", pid=1).scalar_one()


def claim_as(eng, job_id, limit: int = 1000) -> list:
    with db.connect(eng) as conn:
        return db.run(conn, "claim_tis", job_id=job_id, hostname="h", queues=["default"], limit=limit,
                      log_dir="/tmp/engine-test-logs", now=None).all()


def finish_try(eng, ti_id: int, try_number: int, exit_code=1, reason=None):
    with db.connect(eng) as conn:
        return db.run(conn, "finish_ti", ti_id=ti_id, try_number=try_number, exit_code=exit_code,
                      timed_out=False, reason=reason, now=None).scalar()


def db_now(eng) -> datetime:
    return sql(eng, "SELECT CURRENT_TIMESTAMP(6)")[0][0]


def ti(eng, ti_id: int):
    return sql(eng, "SELECT id, dag_id, task_id, state, try_number, retry_at, state_reason FROM task_instance "
                    "WHERE id = :i", i=ti_id)[0]


def dag_error(eng, dag_id: str):
    return sql(eng, "SELECT error_step, error, error_at FROM dag WHERE dag_id = :d", d=dag_id)[0]


def orphan_tick(eng, cfg) -> dict:
    """A scheduler pass whose orphan check is due (the previous pass stamped it)."""
    sql(eng, "UPDATE scheduler_lock SET last_run_at = NULL WHERE name = 'reset_orphans'")
    return tick(eng, cfg)


def bystander_source(days_back: int = 3) -> str:
    start = (datetime.now(timezone.utc) - timedelta(days=days_back)).strftime("%Y-%m-%d")
    return f"""
    with DAG("bystander", schedule="@daily", start_date="{start}", catchup=True, max_active_runs=16):
        BashTask("t", bash_command="true")
    with DAG("manual"):
        BashTask("t", bash_command="true")
"""


def assert_bystanders_get_runs(eng, cfg) -> None:
    """The cron DAG got its due runs and a manual run starts and gets its TI queued."""
    trigger(eng, "manual")
    tick(eng, cfg)
    assert sql(eng, "SELECT count(*) FROM dag_run WHERE dag_id = 'bystander'")[0][0] >= 2
    assert sql(eng, "SELECT state FROM dag_run WHERE dag_id = 'manual'")[0][0] == "running"
    assert sql(eng, "SELECT state FROM task_instance WHERE dag_id = 'manual'")[0][0] == "queued"


# ---- finish_ti_v2 / reset_orphans_v2: retry delays ---------------------------------------------

BAD_SOURCE = """
    with DAG("bad", max_active_tasks=10):
        BashTask("failed_try", bash_command="false", retries=3, retry_delay=3600)
        BashTask("orphaned_try", bash_command="false", retries=3, retry_delay=3600)
"""

# (what is stored by hand in task, the try number the TI is at when it fails)
HUGE_DELAYS = {
    "retry_delay_1e300": ("retry_delay = 1e300", None),
    "backoff_huge_try_number": ("retry_delay = 1e300, retry_exponential_backoff = true, max_retry_delay = 1e300",
                                2_000_000_000),
    "backoff_no_cap": ("retry_delay = 1e300, retry_exponential_backoff = true, max_retry_delay = NULL", 1_000),
}


@pytest.mark.parametrize("case", sorted(HUGE_DELAYS))
def test_a_huge_retry_delay_fails_one_try_and_nothing_else(eng, cfg, tmp_path, case):
    stored, try_number = HUGE_DELAYS[case]
    sync_source(eng, tmp_path / "dags", BAD_SOURCE + bystander_source())
    sql(eng, "UPDATE dag SET is_paused = true WHERE dag_id = 'bystander'")  # its runs come later
    trigger(eng, "bad")
    tick(eng, cfg)
    worker = register(eng)
    claimed = {r.task_id: r for r in claim_as(eng, worker)}
    assert set(claimed) == {"failed_try", "orphaned_try"}
    sql(eng, f"UPDATE task SET {stored} WHERE dag_id = 'bad'")
    if try_number is not None:  # a TI far into its retries
        sql(eng, "UPDATE task_instance SET try_number = :n, max_tries = :m WHERE dag_id = 'bad'",
            n=try_number, m=try_number + 10)
    tries = {t: (try_number or r.try_number) for t, r in claimed.items()}

    # A failed try: the worker's report is taken, the TI waits for a retry at a readable time.
    before = db_now(eng)
    assert finish_try(eng, claimed["failed_try"].ti_id, tries["failed_try"]) == "up_for_retry"
    failed = ti(eng, claimed["failed_try"].ti_id)
    assert failed.state == "up_for_retry"
    assert before < failed.retry_at <= db_now(eng) + timedelta(seconds=MAX_SECONDS)

    # An orphaned try: its worker died; the next tick's reset_orphans ends it the same way.
    sql(eng, "UPDATE job SET state = 'failed' WHERE id = :w", w=worker)
    summary = orphan_tick(eng, cfg)
    assert summary["tis_orphan_failed"] == 1
    orphan = ti(eng, claimed["orphaned_try"].ti_id)
    assert orphan.state == "up_for_retry" and orphan.state_reason == f"worker job {worker} died"
    assert before < orphan.retry_at <= db_now(eng) + timedelta(seconds=MAX_SECONDS)
    assert dag_error(eng, "bad").error is None

    sql(eng, "UPDATE dag SET is_paused = false WHERE dag_id = 'bystander'")
    assert_bystanders_get_runs(eng, cfg)
    history = sql(eng, "SELECT state FROM task_instance_history WHERE dag_id = 'bad'")
    assert [h.state for h in history] == ["failed", "failed"]  # one row per finished try


def test_retry_delays_within_range_keep_their_meaning(eng, cfg, tmp_path):
    """Clamping changes nothing for sane values: backoff doubles, max_retry_delay caps."""
    sync_source(eng, tmp_path / "dags", BAD_SOURCE)
    sql(eng, "UPDATE task SET retry_delay = 10, retry_exponential_backoff = true, max_retry_delay = 25 "
             "WHERE task_id = 'failed_try'")
    trigger(eng, "bad")
    tick(eng, cfg)
    t0 = db_now(eng)
    delays = []
    for try_number in (1, 2, 3):
        sql(eng, "UPDATE task_instance SET state = 'running', try_number = :n WHERE task_id = 'failed_try'",
            n=try_number)
        ti_id = sql(eng, "SELECT id FROM task_instance WHERE task_id = 'failed_try'")[0][0]
        with db.connect(eng) as conn:
            assert db.run(conn, "finish_ti", ti_id=ti_id, try_number=try_number, exit_code=1, timed_out=False,
                          reason=None, now=t0).scalar() == "up_for_retry"
        delays.append((ti(eng, ti_id).retry_at - t0).total_seconds())
    assert delays == [10, 20, 25]


def test_any_reason_text_is_accepted_and_bounded(eng, cfg, tmp_path, dialect):
    sync_source(eng, tmp_path / "dags", BAD_SOURCE)
    trigger(eng, "bad")
    tick(eng, cfg)
    rows = claim_as(eng, None)
    long_reason = "the database refused the report: " + "x" * 100_000
    assert finish_try(eng, rows[0].ti_id, rows[0].try_number, reason=long_reason) == "up_for_retry"
    stored = ti(eng, rows[0].ti_id).state_reason
    assert stored == long_reason[:4000]
    if dialect == "mysql":  # PostgreSQL's driver cannot even send a NUL character in text
        assert finish_try(eng, rows[1].ti_id, rows[1].try_number, reason="a\x00b") == "up_for_retry"
        assert ti(eng, rows[1].ti_id).state_reason == "ab"
    reasons = [h.reason for h in sql(eng, "SELECT reason FROM task_instance_history ORDER BY id")]
    assert reasons[0] == long_reason[:4000]


def test_a_try_whose_task_row_is_gone_still_ends(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", BAD_SOURCE)
    trigger(eng, "bad")
    tick(eng, cfg)
    (row, _) = claim_as(eng, None)
    sql(eng, "DELETE FROM task_dependency WHERE dag_id = 'bad'")
    sql(eng, "DELETE FROM task WHERE dag_id = 'bad' AND task_id = :t", t=row.task_id)
    t0 = db_now(eng)
    assert finish_try(eng, row.ti_id, row.try_number) == "up_for_retry"
    assert ti(eng, row.ti_id).retry_at >= t0 + timedelta(seconds=299)  # the column default, 300 s


# ---- reset_orphans_v2: one orphan that cannot be ended -----------------------------------------

def test_an_orphan_that_cannot_be_ended_is_recorded_and_the_others_go_on(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", BAD_SOURCE + """
    with DAG("good"):
        BashTask("t", bash_command="true", retries=1, retry_delay=3600)
""")
    trigger(eng, "bad")
    trigger(eng, "good")
    tick(eng, cfg)
    worker = register(eng)
    rows = {(r.dag_id, r.task_id): r for r in claim_as(eng, worker)}
    stuck = rows[("bad", "orphaned_try")]
    # The fault: history rows of that one TI are refused (any error inside finish_ti would do).
    sql(eng, f"ALTER TABLE task_instance_history ADD CONSTRAINT test_fault CHECK (ti_id <> {stuck.ti_id})")
    sql(eng, "UPDATE job SET state = 'failed' WHERE id = :w", w=worker)

    summary = orphan_tick(eng, cfg)  # does not raise
    assert summary["tis_orphan_failed"] == 2
    assert ti(eng, rows[("good", "t")].ti_id).state == "up_for_retry"
    assert ti(eng, rows[("bad", "failed_try")].ti_id).state == "up_for_retry"
    left = ti(eng, stuck.ti_id)
    assert left.state == "running" and left.state_reason.startswith("reset_orphans: could not end orphaned try")
    err = dag_error(eng, "bad")
    assert err.error_step == "reset_orphans" and f"TI {stuck.ti_id} " in err.error and "\n" not in err.error
    assert err.error_at is not None
    assert dag_error(eng, "good").error is None

    sql(eng, "ALTER TABLE task_instance_history DROP CONSTRAINT test_fault")
    assert orphan_tick(eng, cfg)["tis_orphan_failed"] == 1
    assert ti(eng, stuck.ti_id).state == "up_for_retry"
    assert dag_error(eng, "bad").error_step is None  # cleared when the step next succeeds for it


# ---- create_dag_runs_v2: dates past 9999, one DAG that fails -----------------------------------

FAR_SOURCE = """
    with DAG("far", schedule="@daily", start_date="2026-01-01", catchup=False):
        BashTask("t", bash_command="true")
"""


@pytest.mark.parametrize("stored", ["9999-12-31 23:59:59", "9999-06-01 00:00:00"])
def test_a_start_date_in_year_9999_never_fires_and_stops_nobody(eng, cfg, tmp_path, stored):
    sync_source(eng, tmp_path / "dags", FAR_SOURCE + bystander_source())
    sql(eng, "UPDATE dag SET start_date = :s, next_dagrun = NULL, next_dagrun_create_after = NULL "
             "WHERE dag_id = 'far'", s=stored)
    tick(eng, cfg)  # does not raise
    tick(eng, cfg)
    rows = sql(eng, "SELECT * FROM dag ORDER BY dag_id")  # every row readable from Python
    far = {r.dag_id: r for r in rows}["far"]
    assert far.next_dagrun is None and far.next_dagrun_create_after is None
    assert far.error_step == "create_dag_runs" and "9999-01-01" in far.error and "\n" not in far.error
    assert far.error_at is not None
    assert sql(eng, "SELECT count(*) FROM dag_run WHERE dag_id = 'far'")[0][0] == 0
    sql(eng, "SELECT * FROM dag_run")
    assert_bystanders_get_runs(eng, cfg)
    # Fixed by hand (a sync does the same): the DAG runs again and its error is cleared.
    sql(eng, "UPDATE dag SET start_date = '2026-01-01' WHERE dag_id = 'far'")
    tick(eng, cfg)
    far = sql(eng, "SELECT next_dagrun, error_step, error FROM dag WHERE dag_id = 'far'")[0]
    assert far.next_dagrun is not None and far.error_step is None and far.error is None
    assert sql(eng, "SELECT count(*) FROM dag_run WHERE dag_id = 'far'")[0][0] == 1


def test_a_next_dagrun_past_the_horizon_is_never_kept(eng, cfg, tmp_path):
    """A next_dagrun stored by hand at or past 9999-01-01 is not used nor written again."""
    sync_source(eng, tmp_path / "dags", FAR_SOURCE.replace("catchup=False", "catchup=True"))
    sql(eng, "UPDATE dag SET next_dagrun = '9999-01-01 00:00:00', next_dagrun_create_after = NULL "
             "WHERE dag_id = 'far'")
    tick(eng, cfg)
    far = sql(eng, "SELECT * FROM dag WHERE dag_id = 'far'")[0]
    assert far.next_dagrun is None and far.error_step == "create_dag_runs"


def test_cron_next_v2_stops_at_the_horizon(eng):
    # PostgreSQL's v1 answers year 10000 (unreadable by Python); MySQL's v1 raises an overflow.
    def nxt(expr, after):
        return sql(eng, "SELECT cron_next_v2(:e, :a)", e=expr, a=after)[0][0]
    assert nxt("0 0 1 1 *", "9998-06-01 00:00:00") is None  # 9999-01-01 itself is the horizon
    assert nxt("0 0 1 1 *", "9997-06-01 00:00:00") == datetime(9998, 1, 1, tzinfo=timezone.utc)
    assert nxt("* * * * *", "9998-12-31 23:58:00") == datetime(9998, 12, 31, 23, 59, tzinfo=timezone.utc)
    assert nxt("* * * * *", "9998-12-31 23:59:00") is None
    assert nxt("* * * * *", "9999-12-31 23:59:59") is None
    assert nxt("0 0 29 2 *", "9998-12-31 23:59:59") is None  # the next 29 February is in year 10000


def add_fault(eng, table: str, dag_id: str) -> None:
    """Any statement of create_dag_runs that writes `table` for this DAG fails (a CHECK)."""
    sql(eng, f"ALTER TABLE {table} ADD CONSTRAINT test_fault CHECK (dag_id <> '{dag_id}')")


def drop_fault(eng, table: str) -> None:
    sql(eng, f"ALTER TABLE {table} DROP CONSTRAINT test_fault")


@pytest.mark.parametrize("step, table", [("creating runs", "dag_run"), ("starting runs", "task_instance")])
def test_one_dag_failing_in_create_dag_runs_is_recorded_and_the_others_get_runs(eng, cfg, tmp_path, step, table):
    sync_source(eng, tmp_path / "dags", bystander_source() + """
    with DAG("broken", schedule="@daily", start_date="2026-01-01", catchup=False):
        BashTask("t", bash_command="true")
    with DAG("zzz"):
        BashTask("t", bash_command="true")
""")
    if table == "task_instance":  # a queued run whose start fails
        trigger(eng, "broken")
        sql(eng, "UPDATE dag SET next_dagrun_create_after = '2999-01-01' WHERE dag_id = 'broken'")
    add_fault(eng, table, "broken")
    trigger(eng, "zzz")  # a DAG after the broken one, in both steps' order
    tick(eng, cfg)  # does not raise
    err = dag_error(eng, "broken")
    assert err.error_step == "create_dag_runs" and err.error.startswith(step + ": ") and "test_fault" in err.error
    assert "\n" not in err.error
    broken_runs = sql(eng, "SELECT state FROM dag_run WHERE dag_id = 'broken'")
    assert [r.state for r in broken_runs] == ([] if table == "dag_run" else ["queued"])  # all or nothing
    assert sql(eng, "SELECT count(*) FROM task_instance WHERE dag_id = 'broken'")[0][0] == 0
    assert sql(eng, "SELECT state FROM dag_run WHERE dag_id = 'zzz'")[0][0] == "running"
    assert_bystanders_get_runs(eng, cfg)
    for other in ("bystander", "manual", "zzz"):
        assert dag_error(eng, other).error_step is None

    drop_fault(eng, table)
    tick(eng, cfg)
    assert dag_error(eng, "broken").error_step is None
    assert [r.state for r in sql(eng, "SELECT state FROM dag_run WHERE dag_id = 'broken'")] == ["running"]


# ---- claim_tis_v2: a try number at INT32_MAX -----------------------------------------------------

def test_a_try_number_at_int32_max_is_claimed_and_every_other_ti_too(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", BAD_SOURCE)
    trigger(eng, "bad")
    tick(eng, cfg)
    sql(eng, "UPDATE task_instance SET try_number = :n WHERE task_id = 'failed_try'", n=INT32_MAX)
    rows = {r.task_id: r for r in claim_as(eng, None)}  # v1: "integer out of range" for every worker
    assert set(rows) == {"failed_try", "orphaned_try"}
    assert rows["failed_try"].try_number == INT32_MAX and rows["orphaned_try"].try_number == 1
    assert rows["failed_try"].log_path.endswith(f"/attempt={INT32_MAX}.log")
    assert finish_try(eng, rows["failed_try"].ti_id, INT32_MAX) == "failed"


# ---- defer_ti_v2, fire_trigger_v2, claim_triggers_v2 ---------------------------------------------

DEFER_SOURCE = """
    with DAG("d", max_active_tasks=10):
        PythonTask("a", python_callable="x:y", retries=1, retry_delay=3600)
        PythonTask("b", python_callable="x:y", retries=1, retry_delay=3600)
"""
GOOD_DEFER = dict(classpath="engine.triggers:DateTimeTrigger", trigger_kwargs='{"moment": "2999-01-01T00:00:00+00:00"}',
                  method="resume", next_kwargs="{}", timeout=None)


@pytest.fixture
def running(eng, cfg, tmp_path):
    """DAG d's two TIs, claimed (running): {task_id: claimed row}."""
    sync_source(eng, tmp_path / "dags", DEFER_SOURCE)
    trigger(eng, "d")
    tick(eng, cfg)
    return {r.task_id: r for r in claim_as(eng, None)}


def defer_raw(eng, row, **changes):
    args = {**GOOD_DEFER, **changes}
    with db.connect(eng) as conn:
        return db.run(conn, "defer_ti", ti_id=row.ti_id, try_number=row.try_number, now=None, **args).scalar()


BAD_DEFERS = {
    "timeout_1e300": (dict(timeout=1e300), "bad timeout"),
    "timeout_negative": (dict(timeout=-1.0), "bad timeout"),
    "timeout_nan": (dict(timeout=float("nan")), "bad timeout"),  # PostgreSQL only: see below
    "timeout_infinity": (dict(timeout=float("inf")), "bad timeout"),
    "kwargs_nan": (dict(trigger_kwargs='{"x": NaN}'), "trigger kwargs are not plain JSON"),
    "kwargs_not_json": (dict(trigger_kwargs="{"), "trigger kwargs are not plain JSON"),
    "kwargs_a_list": (dict(trigger_kwargs="[1, 2]"), "trigger kwargs must be a JSON object"),
    "next_kwargs_infinity": (dict(next_kwargs='{"x": Infinity}'), "next kwargs are not plain JSON"),
    "next_kwargs_a_string": (dict(next_kwargs='"s"'), "next kwargs must be a JSON object"),
    "classpath_no_class": (dict(classpath="engine.triggers"), "bad trigger classpath"),
    "classpath_too_long": (dict(classpath="m:" + "C" * 5000), "bad trigger classpath"),
    "classpath_nul": (dict(classpath="m:C\x00"), "bad trigger classpath"),  # MySQL only: see below
    "method_empty": (dict(method=""), "bad method"),
    "method_too_long": (dict(method="m" * 300), "bad method"),
}


@pytest.mark.parametrize("case", sorted(BAD_DEFERS))
def test_defer_refuses_a_bad_argument_with_a_one_line_error_and_changes_nothing(eng, running, dialect, case):
    changes, needle = BAD_DEFERS[case]
    if dialect == "mysql" and case in ("timeout_nan", "timeout_infinity"):
        pytest.skip("PyMySQL cannot send NaN or Infinity (a DOUBLE holds neither); the worker refuses them")
    if dialect == "postgresql" and case == "classpath_nul":
        pytest.skip("psycopg cannot send a NUL character in text; the worker refuses it")
    with pytest.raises(sa.exc.DBAPIError) as info:
        defer_raw(eng, running["a"], **changes)
    assert db.is_user_error(info.value), info.value
    message = db.error_message(info.value)
    assert re.match(r"defer_ti_v\d+: ", message) and needle in message and "\n" not in message, message
    assert ti(eng, running["a"].ti_id).state == "running"
    assert sql(eng, f"SELECT count(*) FROM {'`trigger`' if dialect == 'mysql' else 'trigger'}")[0][0] == 0
    assert defer_raw(eng, running["b"]) == "deferred"  # a good report right after: as usual


def test_defer_timeout_at_the_bound_is_accepted(eng, running):
    assert defer_raw(eng, running["a"], timeout=float(MAX_SECONDS)) == "deferred"


def deferred_trigger(eng, row, timeout=None) -> int:
    assert defer_raw(eng, row, timeout=timeout) == "deferred"
    return sql(eng, "SELECT trigger_id FROM task_instance WHERE id = :i", i=row.ti_id)[0][0]


def fire_raw(eng, trigger_id: int, event: str | None, error: str | None):
    with db.connect(eng) as conn:
        return db.run(conn, "fire_trigger", trigger_id=trigger_id, event=event, error=error, now=None,
                      boost=1000).scalar()


@pytest.mark.parametrize("event", ["NaN", '{"x": NaN}', '{"x": 1', "not json"])
def test_an_event_that_is_not_json_fails_that_try_only(eng, running, event):
    bad, good = deferred_trigger(eng, running["a"]), deferred_trigger(eng, running["b"])
    assert fire_raw(eng, bad, event, None) == "up_for_retry"
    assert "the trigger's event is not plain JSON" in ti(eng, running["a"].ti_id).state_reason
    assert fire_raw(eng, good, '{"ok": true}', None) == "scheduled"


def test_fire_accepts_any_error_text_and_a_huge_retry_delay(eng, running, dialect):
    sql(eng, "UPDATE task SET retry_delay = 1e300")
    trig = deferred_trigger(eng, running["a"])
    error = "boom " * 10_000 + ("\x00" if dialect == "mysql" else "")
    assert fire_raw(eng, trig, None, error) == "up_for_retry"  # v1: retry_at overflows
    row = ti(eng, running["a"].ti_id)
    assert row.retry_at <= db_now(eng) + timedelta(seconds=MAX_SECONDS)
    assert row.state_reason == error.replace("\x00", "")[:4000]


def claim_triggers(eng, job_id: int, now=None) -> list:
    with db.connect(eng) as conn:
        return db.run(conn, "claim_triggers", job_id=job_id, limit=100, threshold=60.0, now=now).all()


def test_a_timeout_with_a_huge_retry_delay_does_not_stop_the_triggerer(eng, running):
    sql(eng, "UPDATE task SET retry_delay = 1e300 WHERE task_id = 'a'")
    deferred_trigger(eng, running["a"], timeout=0.0)
    waiting = deferred_trigger(eng, running["b"])
    job = register(eng, "triggerer")
    claimed = claim_triggers(eng, job)  # v1: the timeout's retry_at overflows, the pass fails
    assert [r.trigger_id for r in claimed] == [waiting]
    row = ti(eng, running["a"].ti_id)
    assert row.state == "up_for_retry" and row.state_reason.startswith("trigger timed out")


def test_a_timeout_that_cannot_fire_is_recorded_and_the_others_go_on(eng, running):
    deferred_trigger(eng, running["a"], timeout=0.0)
    deferred_trigger(eng, running["b"], timeout=0.0)
    stuck = running["a"].ti_id
    sql(eng, f"ALTER TABLE task_instance_history ADD CONSTRAINT test_fault CHECK (ti_id <> {stuck})")
    job = register(eng, "triggerer")
    claim_triggers(eng, job)  # does not raise
    assert ti(eng, running["b"].ti_id).state == "up_for_retry"
    left = ti(eng, stuck)
    assert left.state == "deferred" and left.state_reason.startswith("claim_triggers: could not fire timed-out trigger")
    err = dag_error(eng, "d")
    assert err.error_step == "claim_triggers" and f"of TI {stuck}:" in err.error and "\n" not in err.error
    sql(eng, "ALTER TABLE task_instance_history DROP CONSTRAINT test_fault")
    claim_triggers(eng, job)
    assert ti(eng, stuck).state == "up_for_retry"
    assert dag_error(eng, "d").error_step is None


# ---- requeue_stuck_v2: counters at INT32_MAX -----------------------------------------------------

def test_a_stuck_ti_with_counters_at_int32_max_does_not_stop_the_pass(eng, cfg, tmp_path):
    sync_source(eng, tmp_path / "dags", BAD_SOURCE)
    trigger(eng, "bad")
    tick(eng, cfg)  # both TIs queued
    sql(eng, "UPDATE task_instance SET queued_at = :t", t=db_now(eng) - timedelta(days=1))
    sql(eng, "UPDATE task_instance SET try_number = :n, requeue_count = :n WHERE task_id = 'failed_try'", n=INT32_MAX)
    summary = tick(eng, cfg)  # v1: "integer out of range" on every pass
    assert (summary["tis_requeued"], summary["tis_stuck_failed"]) == (1, 1)
    stuck = sql(eng, "SELECT state, try_number, requeue_count FROM task_instance WHERE task_id = 'failed_try'")[0]
    assert (stuck.state, stuck.try_number, stuck.requeue_count) == ("failed", INT32_MAX, INT32_MAX)
    other = sql(eng, "SELECT state, requeue_count FROM task_instance WHERE task_id = 'orphaned_try'")[0]
    assert other.requeue_count == 1 and other.state in ("scheduled", "queued")
