"""finish_tis_v1 (named statement finish_tis) on both dialects: many tries' outcomes in one call,
each ending its try exactly as finish_ti_v3 would (states, retries, history, results), fenced per
try: a late or duplicate report in a batch never changes a newer try."""
from __future__ import annotations

import json

import pytest

from engine import db, wakeup
from tests.helpers import claim, sql, sync_source, tick, trigger


def finish_batch(eng, tries, max_bytes=None, now=None) -> list[tuple]:
    """tries: (ti, exit_code, timed_out, reason, result) each; rows (ti_id, try_number, state)."""
    with db.connect(eng) as conn:
        rows = db.run(conn, "finish_tis", ti_ids=[t[0].ti_id for t in tries],
                      try_numbers=[t[0].try_number for t in tries], exit_codes=[t[1] for t in tries],
                      timed_outs=[t[2] for t in tries], reasons=[t[3] for t in tries],
                      results=[t[4] for t in tries], now=now, max_bytes=max_bytes).all()
    return [tuple(r) for r in rows]


def setup_dag(eng, cfg, tmp_path, names, retries=None) -> dict:
    retries = retries or {}
    tasks = "\n".join(f"    PythonTask({n!r}, python_callable='x:y', retries={retries.get(n, 0)}, retry_delay=0)"
                      for n in names)
    sync_source(eng, tmp_path / "dags", f"with DAG('b', max_active_tasks=None):\n{tasks}\n")
    sql(eng, "UPDATE dag SET is_paused = false")
    trigger(eng, "b")
    tick(eng, cfg)
    tis = {ti.task_id: ti for ti in claim(eng)}
    assert sorted(tis) == sorted(names)
    return tis


def history(eng) -> dict:
    rows = sql(eng, "SELECT task_id, try_number, state FROM task_instance_history WHERE dag_id = 'b'")
    return sorted((r.task_id, r.try_number, r.state) for r in rows)


def test_a_batch_ends_each_try_as_finish_ti_would(eng, cfg, tmp_path):
    names = ["ok", "result", "skip", "fail", "retry", "timeout", "nan", "big"]
    tis = setup_dag(eng, cfg, tmp_path, names, retries={"retry": 1})
    batch = [(tis["ok"], 0, False, None, None), (tis["result"], 0, False, None, '{"n": [1, 2.5, "s"]}'),
             (tis["skip"], 99, False, None, None), (tis["fail"], 2, False, "it broke", None),
             (tis["retry"], 1, False, None, None), (tis["timeout"], 0, True, None, None),
             (tis["nan"], 0, False, None, '{"n": NaN}'), (tis["big"], 0, False, None, json.dumps("x" * 200))]
    rows = finish_batch(eng, batch[::-1], max_bytes=100)  # any order in: TI id order out
    assert [r[0] for r in rows] == sorted(t.ti_id for t in tis.values())
    by_id = {r[0]: r for r in rows}
    got = {n: by_id[t.ti_id][2] for n, t in tis.items()}
    assert got == {"ok": "success", "result": "success", "skip": "skipped", "fail": "failed",
                   "retry": "up_for_retry", "timeout": "failed", "nan": "failed", "big": "failed"}
    assert all(by_id[t.ti_id][1] == t.try_number for t in tis.values())
    stored = sql(eng, "SELECT task_id, value FROM task_results WHERE dag_id = 'b'")
    assert {r.task_id: json.loads(r.value) if isinstance(r.value, str) else r.value for r in stored} == \
        {"result": {"n": [1, 2.5, "s"]}}
    why = dict(sql(eng, "SELECT task_id, state_reason FROM task_instance WHERE dag_id = 'b'"))
    assert why["fail"] == "it broke" and why["timeout"] == "execution_timeout exceeded"
    assert why["nan"].startswith("the task's result is not plain JSON")
    assert why["big"].startswith("the task's result is 202 bytes, more than max_result_bytes (100)")
    retry_at = sql(eng, "SELECT retry_at FROM task_instance WHERE id = :i", i=tis["retry"].ti_id)[0][0]
    assert retry_at is not None
    assert len(history(eng)) == len(names)  # one history row per finished try


def test_late_and_duplicate_reports_change_nothing(eng, cfg, tmp_path):
    tis = setup_dag(eng, cfg, tmp_path, ["a", "b", "c"], retries={"a": 2})
    a, b, c = tis["a"], tis["b"], tis["c"]
    # try 1 of a fails (retry), is scheduled again and claimed as try 2
    assert finish_batch(eng, [(a, 1, False, None, None)]) == [(a.ti_id, a.try_number, "up_for_retry")]
    tick(eng, cfg)
    (a2,) = claim(eng)
    assert (a2.ti_id, a2.try_number) == (a.ti_id, a.try_number + 1)
    # A batch with a late report of try 1 (success), b twice (the second is stale), c once.
    rows = finish_batch(eng, [(a, 0, False, None, '{"late": 1}'), (b, 0, False, None, None),
                              (c, 1, False, None, None), (b, 1, False, None, None)])
    assert sorted(rows, key=lambda r: (r[0], r[2] is None)) == [
        (a.ti_id, a.try_number, None), (b.ti_id, b.try_number, "success"), (b.ti_id, b.try_number, None),
        (c.ti_id, c.try_number, "failed")]
    state = dict(sql(eng, "SELECT task_id, state FROM task_instance WHERE dag_id = 'b'"))
    assert state == {"a": "running", "b": "success", "c": "failed"}  # try 2 of a untouched
    assert sql(eng, "SELECT count(*) FROM task_results WHERE dag_id = 'b'")[0][0] == 0
    # the whole batch again: every report is stale now
    assert [r[2] for r in finish_batch(eng, [(b, 0, False, None, None), (c, 1, False, None, None)])] == [None, None]
    assert history(eng) == [("a", a.try_number, "failed"), ("b", b.try_number, "success"),
                            ("c", c.try_number, "failed")]
    assert finish_batch(eng, [(a2, 0, False, None, None)]) == [(a.ti_id, a2.try_number, "success")]


def test_an_empty_batch_and_arrays_of_different_lengths(eng, cfg, tmp_path):
    tis = setup_dag(eng, cfg, tmp_path, ["a"])
    assert finish_batch(eng, []) == []
    with pytest.raises(Exception, match="different lengths"):
        with db.connect(eng) as conn:
            db.run(conn, "finish_tis", ti_ids=[tis["a"].ti_id], try_numbers=[tis["a"].try_number], exit_codes=[],
                   timed_outs=[False], reasons=[None], results=[None], now=None, max_bytes=None).all()
    assert dict(sql(eng, "SELECT task_id, state FROM task_instance WHERE dag_id = 'b'")) == {"a": "running"}


def test_a_batch_wakes_the_scheduler_once_it_commits(eng, cfg, tmp_path, dialect):
    if dialect != "postgresql":
        pytest.skip("MySQL/MariaDB have no LISTEN/NOTIFY: the scheduler polls")
    tis = setup_dag(eng, cfg, tmp_path, ["a"])
    listener = wakeup.Listener(eng, "listen_scheduler")
    try:
        assert listener.open()
        listener.wait(0.01)  # whatever the setup sent
        assert finish_batch(eng, [(tis["a"], 0, False, None, None)]) == [(tis["a"].ti_id, tis["a"].try_number,
                                                                          "success")]
        assert listener.wait(60) is True
    finally:
        listener.close()
