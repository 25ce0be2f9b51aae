"""Task code relative to the DAGs folder: `dags sync` stores each DAG file's path relative to
the setting dags_folder, a worker (or `tasks test`) resolves it against its own dags_folder, so a
worker whose checkout is elsewhere runs the tasks; a file outside the folder is refused at sync;
absolute filelocs stored before keep working and the next sync makes them relative."""
from __future__ import annotations

import shutil
import time

import pytest
from click.testing import CliRunner

from cli.main import main
from engine.config import load_config
from engine.errors import EngineError
from engine.dagsync import sync
from engine.paths import dag_file
from engine.worker import Worker
from tests.helpers import sql, tick, trigger, write_dags

DAG_SRC = """
    with DAG("etl", is_paused_upon_creation=False):
        a = PythonTask("py", python_callable="helpers:where")   # helpers.py next to the DAG file
        b = BashTask("sh", bash_command="pwd > @OUT@/sh.txt")
        a >> b
"""
HELPERS = """
import os
def where():
    with open(os.path.join(os.environ["OUT_DIR_PY"], "py.txt"), "w") as f:
        f.write(__file__)
"""


def cli(db_url, *args, folder):
    return CliRunner().invoke(main, ["--database-url", db_url, *args], env={"ENGINE_DAGS_FOLDER": str(folder)})


def make_checkout(root, out):
    write_dags(root / "team", DAG_SRC.replace("@OUT@", str(out)))
    (root / "team" / "helpers.py").write_text(HELPERS)
    return root


def run_all(eng, cfg, deadline=90.0):
    w = Worker(eng, cfg)
    w.start()
    try:
        end = time.monotonic() + deadline
        while sql(eng, "SELECT count(*) FROM dag_run WHERE state NOT IN ('success', 'failed')")[0][0]:
            assert time.monotonic() < end, "tasks did not finish in time"
            tick(eng, cfg)
            w.run_once()
            time.sleep(0.05)
    finally:
        w.stop(timeout=0)


def test_a_worker_runs_task_code_from_its_own_checkout(db_url, eng, cfg, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("OUT_DIR_PY", str(out))
    synced = make_checkout(tmp_path / "ci" / "dags", out)
    r = cli(db_url, "dags", "sync", folder=synced)  # PATH defaults to the DAGs folder
    assert r.exit_code == 0, r.output
    assert sql(eng, "SELECT fileloc FROM dag WHERE dag_id = 'etl'") == [("team/dags.py",)]
    # the worker's host has the DAGs elsewhere; the syncing host's copy is gone
    elsewhere = tmp_path / "worker-host" / "srv" / "dags"
    shutil.copytree(synced, elsewhere)
    shutil.rmtree(tmp_path / "ci")
    trigger(eng, "etl")
    run_all(eng, load_config({"database_url": db_url, "home": str(tmp_path / "home"), "dags_folder": str(elsewhere)}))
    assert dict(sql(eng, "SELECT task_id, state FROM task_instance")) == {"py": "success", "sh": "success"}
    assert (out / "py.txt").read_text() == str(elsewhere / "team" / "helpers.py")
    assert (out / "sh.txt").read_text().strip() == str(elsewhere / "team")  # bash runs in the DAG file's folder
    # a worker without the checkout fails the try with one line naming its dags_folder
    trigger(eng, "etl", run_id="r2")
    run_all(eng, load_config({"database_url": db_url, "home": str(tmp_path / "home"),
                              "dags_folder": str(tmp_path / "nowhere")}))
    reason = sql(eng, "SELECT state_reason FROM task_instance WHERE task_id = 'py' AND run_id = 'r2'")[0][0]
    assert "dags_folder" in reason and str(tmp_path / "nowhere") in reason and "\n" not in reason, reason


def test_a_file_outside_the_dags_folder_is_refused_and_nothing_is_written(db_url, eng, tmp_path):
    folder = tmp_path / "dags"
    folder.mkdir()
    outside = make_checkout(tmp_path / "elsewhere", tmp_path)
    for args in (["dags", "sync", str(outside)], ["dags", "sync", "--check", str(outside)]):
        r = cli(db_url, *args, folder=folder)
        assert r.exit_code == 1, r.output
        line = r.output.strip()
        assert "\n" not in line and "outside the DAGs folder" in line and "dags_folder" in line, line
    # a symbolic link inside the folder to a file outside it
    (folder / "link.py").symlink_to(outside / "team" / "dags.py")
    r = cli(db_url, "dags", "sync", folder=folder)
    assert r.exit_code == 1 and "DAG file" in r.output and "outside the DAGs folder" in r.output, r.output
    r = cli(db_url, "dags", "sync", folder=tmp_path / "missing")
    assert r.exit_code == 1 and "missing" in r.output
    assert sql(eng, "SELECT count(*) FROM dag")[0][0] == 0


MARKER_DAG = """
open(@MARKER@, "w").write("ran")
from engine import DAG, BashTask
with DAG("outs"):
    BashTask("a", bash_command="true")
"""


def test_a_path_outside_the_dags_folder_is_refused_before_any_file_is_imported(tmp_path):
    """Refused before the database is touched and before any file under PATH runs: `dags sync /`
    would otherwise execute every *.py on the host."""
    folder, outside = tmp_path / "dags", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (outside / "o.py").write_text(MARKER_DAG.replace("@MARKER@", repr(str(outside / "MARKER"))))
    (folder / "link").mkdir()
    (folder / "link" / "o.py").symlink_to(outside / "o.py")  # a symbolic link in the folder to the file outside
    for args in (["dags", "sync", str(outside)], ["dags", "sync", "--check", str(outside)],
                 ["dags", "sync", "--check"], ["dags", "sync", str(folder / "link")]):
        r = cli("postgresql+psycopg://nobody@127.0.0.1:1/none", *args, folder=folder)
        assert r.exit_code == 1 and "outside the DAGs folder" in r.output and len(r.output.splitlines()) == 1, \
            (args, r.output)
        assert not (outside / "MARKER").exists(), args
    with pytest.raises(EngineError, match="outside the DAGs folder"):
        sync(None, outside, dags_folder=folder)  # the Python API too
    assert not (outside / "MARKER").exists()


def test_empty_dags_folder_setting_is_one_line():
    r = cli("postgresql+psycopg://nobody@127.0.0.1:1/none", "dags", "sync", folder=" ")
    assert r.exit_code != 0 and "dags_folder" in r.output and "empty" in r.output


def test_absolute_filelocs_from_before_keep_working_and_the_next_sync_makes_them_relative(db_url, eng, cfg, tmp_path,
                                                                                           monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("OUT_DIR_PY", str(out))
    folder = make_checkout(tmp_path / "dags", out)
    sync(eng, folder)  # without a DAGs folder: the absolute path, as every sync before revision 0012
    stored = sql(eng, "SELECT fileloc FROM dag")[0][0]
    assert stored == str(folder / "team" / "dags.py")
    trigger(eng, "etl", run_id="before")
    run_all(eng, load_config({"database_url": db_url, "home": str(tmp_path / "home"),
                              "dags_folder": str(tmp_path / "unrelated")}))  # used as it is
    assert {s for (s,) in sql(eng, "SELECT state FROM task_instance")} == {"success"}
    # the same file synced from the DAGs folder is the same owner (no --force needed), now relative
    r = cli(db_url, "dags", "sync", folder=folder)
    assert r.exit_code == 0, r.output
    assert sql(eng, "SELECT fileloc, is_active FROM dag") == [("team/dags.py", True)]
    r = cli(db_url, "dags", "sync", str(folder / "team"), folder=folder)  # a sub-folder: the same relative path
    assert r.exit_code == 0 and "deactivated" not in r.output, r.output
    assert sql(eng, "SELECT fileloc, is_active FROM dag") == [("team/dags.py", True)]
    # a file dropped from the folder deactivates its DAG, whichever form it was stored in
    (folder / "team" / "dags.py").unlink()
    r = cli(db_url, "dags", "sync", folder=folder)
    assert r.exit_code == 0 and "deactivated: etl" in r.output, r.output


@pytest.mark.parametrize("fileloc, message", [("../x.py", "leaves the DAGs folder"),
                                              ("team/x.py", "is not a folder")])
def test_dag_file_refuses_what_it_cannot_resolve(tmp_path, fileloc, message):
    with pytest.raises(ValueError, match=message):
        dag_file(fileloc, tmp_path / "none")
    assert dag_file("/abs/x.py", None).as_posix() == "/abs/x.py"
