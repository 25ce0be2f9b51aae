"""Run ids are validated like dag ids (trigger_dag_v2), and every log path claim_tis_v2 builds
is under the log folder with components a file system accepts, whatever the ids hold."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from engine import db
from tests.helpers import sql, sync_source, tick, trigger

LOG_DIR = "/tmp/engine-test-logs"
RULE = "use 1-250 characters from A-Z a-z 0-9 _ . - : + ~ (not '.' or '..')"

BAD_RUN_IDS = {
    "traversal": "../../../../tmp/x/outside",
    "empty": "",
    "too_long": "r" * 300,
    "dot": ".",
    "dotdot": "..",
    "space": "a b",
    "trailing_space": "ab ",
    "newline": "a\nb",
    "slash": "a/b",
    "non_ascii": "caf\u00e9",
}


@pytest.fixture
def one_dag(eng, tmp_path):
    sync_source(eng, tmp_path / "dags", """
    with DAG("d"):
        BashTask("t", bash_command="true")
""")


@pytest.mark.parametrize("case", sorted(BAD_RUN_IDS))
def test_trigger_refuses_a_run_id_outside_the_rule(eng, one_dag, case):
    run_id = BAD_RUN_IDS[case]
    with pytest.raises(sa.exc.DBAPIError) as info:
        trigger(eng, "d", run_id)
    assert db.is_user_error(info.value), info.value
    message = db.error_message(info.value)
    assert message.startswith("bad run id ") and message.endswith(RULE), message
    assert "\n" not in message
    assert sql(eng, "SELECT count(*) FROM dag_run")[0][0] == 0


@pytest.mark.parametrize("run_id", ["r" * 250, "manual__2026-01-01T00:00:00+00:00", "a.b:c+d~e-f_g", "..."])
def test_trigger_accepts_every_run_id_of_the_rule(eng, one_dag, run_id):
    row = trigger(eng, "d", run_id)
    assert row.run_id == run_id
    assert trigger(eng, "d").run_id.startswith("manual__")  # the generated id follows the rule too


def claim_paths(eng) -> list[str]:
    with db.connect(eng) as conn:
        rows = db.run(conn, "claim_tis", job_id=None, hostname="h", queues=["default"], limit=100,
                      log_dir=LOG_DIR, now=None).all()
    return [r.log_path for r in rows]


def assert_safe(path: str) -> None:
    assert os.path.normpath(path).startswith(LOG_DIR + "/"), path
    parts = path[len(LOG_DIR) + 1:].split("/")
    assert len(parts) == 4, path  # dag_id=, run_id=, task_id=, attempt=
    for part in parts:
        assert part not in ("", ".", "..") and len(part.encode()) <= 255, part


def test_log_paths_of_hand_written_run_ids_stay_in_the_log_folder(eng, cfg, one_dag):
    evil = ["../../../../tmp/x/outside", "..", "a/../../b", "x" * 300, "caf\u00e9 \u00e0 la carte"]
    for i, run_id in enumerate(evil):  # as an older version or a SQL console could write them
        sql(eng, "INSERT INTO dag_run (dag_id, run_id, run_type, state, logical_date, run_after, conf, created_at) "
                 "VALUES ('d', :r, 'manual', 'queued', :t, :t, '{}', :t)",
            r=run_id[:250] if eng.dialect.name != "postgresql" else run_id,
            t=sql(eng, "SELECT CURRENT_TIMESTAMP(6)")[0][0])
    tick(eng, cfg)
    paths = claim_paths(eng)
    assert len(paths) == len(evil)
    for path in paths:
        assert_safe(path)
    assert len(set(paths)) == len(paths)
    plain = [p for p in paths if "@" not in p]
    assert plain == []  # every one of these ids is shown as a prefix and an md5


def test_log_path_keeps_plain_ids_readable(eng, cfg, one_dag):
    trigger(eng, "d", "r1")
    tick(eng, cfg)
    (path,) = claim_paths(eng)
    assert path == f"{LOG_DIR}/dag_id=d/run_id=r1/task_id=t/attempt=1.log"


def test_ids_of_250_characters_run_to_success_with_a_real_worker(db_url, eng, cfg, tmp_path):
    dag_id, task_id, run_id = "d" * 250, "t" * 250, "r" * 250
    sync_source(eng, tmp_path / "dags", f"""
    with DAG("{dag_id}"):
        BashTask("{task_id}", bash_command="echo hello from the long ids")
""")
    trigger(eng, dag_id, run_id)
    tick(eng, cfg)
    log_dir = tmp_path / "logs"
    env = {**os.environ, "ENGINE_DATABASE_URL": db_url, "ENGINE_HOME": str(tmp_path / "home"),
           "ENGINE_LOG_DIR": str(log_dir)}
    r = subprocess.run([sys.executable, "-m", "cli.main", "worker", "--burst"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 120
    while sql(eng, "SELECT state FROM dag_run")[0][0] != "success":
        assert time.monotonic() < deadline, sql(eng, "SELECT state, state_reason FROM task_instance")
        tick(eng, cfg)
        time.sleep(0.2)
    (ti,) = sql(eng, "SELECT state, log_path FROM task_instance")
    assert ti.state == "success"
    log = Path(ti.log_path)
    assert log.is_file() and log.resolve().is_relative_to(log_dir.resolve())
    assert "hello from the long ids" in log.read_text()
    for part in log.relative_to(log_dir).parts:
        assert len(part.encode()) <= 255
