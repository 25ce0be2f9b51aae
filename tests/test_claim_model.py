"""claim_tis takes exactly what a worker is owed: the first `limit` queued TIs of its queues
(executor 'default'), by priority_weight DESC, queued_at, id, whatever queues it names
(duplicates, unknown ones, several at once) and however the TIs are spread over them. Checked
against a one-line model on random states, queues, priorities and queue times (ties included),
for the version the named query calls (claim_tis_v5: v3 behind a check that a queue holds work for
the worker's executor), for claim_tis_v4 (the same check, any executor), for claim_tis_v3 (one
index-ordered read per queue) and for claim_tis_v2, which read and sorted every queued TI."""
from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import calls, db
from tests.helpers import sql, started_run
from tests.world import T0

N = 14
QUEUES = ["a", "b", "c"]


@pytest.fixture
def tis(eng, tmp_path):
    return started_run(eng, tmp_path / "dags", 'claims', N)


ti_rows = st.lists(st.tuples(st.sampled_from(["queued"] * 4 + ["scheduled", "running"]), st.sampled_from(QUEUES),
                             st.integers(1, 4), st.integers(0, 3), st.sampled_from(["default"] * 4 + ["celery"])),
                   min_size=N, max_size=N)


@pytest.mark.parametrize("version", [None, 4, 3, 2], ids=["named-query", "v4", "v3", "v2"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=ti_rows, queues=st.lists(st.sampled_from(QUEUES + ["zz"]), min_size=1, max_size=4),
       limit=st.integers(0, N + 2))
def test_claim_takes_the_first_queued_tis_of_the_workers_queues(eng, tis, version, rows, queues, limit):
    with eng.begin() as conn:
        for ti_id, (state, queue, pw, sec, executor) in zip(tis, rows):
            conn.execute(sa.text("UPDATE task_instance SET state = :s, queue = :q, priority_weight = :p, "
                                 "queued_at = :t, executor = :e, try_number = 0, worker_job_id = NULL WHERE id = :i"),
                         {"s": state, "q": queue, "p": pw, "t": T0 + timedelta(seconds=sec), "e": executor, "i": ti_id})
    owed = sorted(((-pw, sec, ti_id) for ti_id, (state, queue, pw, sec, executor) in zip(tis, rows)
                   if state == "queued" and queue in queues and executor == "default"))[:limit]
    caller = eng if version is None else calls.pin(eng, f"claim_tis={version}")  # as procedure_versions does
    with db.connect(caller) as conn:
        got = db.run(conn, "claim_tis", job_id=None, hostname="h", queues=queues, limit=limit,
                     log_dir="/tmp/logs", now=None).all()
    assert sorted(r.ti_id for r in got) == sorted(ti_id for _, _, ti_id in owed)  # (rows come in no set order)
    assert all(r.try_number == 1 for r in got)
    claimed = {r.ti_id for r in got}
    states = dict(sql(eng, "SELECT id, state FROM task_instance WHERE dag_id = 'claims'"))
    assert all(states[ti_id] == ("running" if ti_id in claimed else row[0]) for ti_id, row in zip(tis, rows))


def test_an_idle_claim_answers_without_entering_v3(eng, tis, dialect):
    """claim_tis_v5: a poll finding nothing queued for it in the worker's queues (another queue
    holds its work, its own queue a Celery TI) returns no row, with the columns of a claim that
    finds some, and never enters claim_tis_v3 (PostgreSQL: v3's call count in the transaction;
    MySQL: v3's session temporary table is never made); once its queue holds a TI of its
    executor, the same call claims it via v3."""
    sql(eng, "UPDATE task_instance SET state = 'queued', queue = 'b', queued_at = :t WHERE id = :i", t=T0, i=tis[0])
    sql(eng, "UPDATE task_instance SET state = 'queued', queue = 'a', queued_at = :t, executor = 'celery' "
             "WHERE id = :i", t=T0, i=tis[1])

    def claim(conn, queues):
        return db.run(conn, "claim_tis", job_id=None, hostname="h", queues=queues, limit=4, log_dir="/tmp/logs",
                      now=None)

    def entered_v3(conn) -> bool:
        if dialect == "postgresql":
            return bool(conn.execute(sa.text(
                "SELECT pg_stat_get_xact_function_calls(to_regproc('claim_tis_v3'))")).scalar())
        try:
            with conn.begin_nested():
                conn.execute(sa.text("SELECT count(*) FROM claim_tis_v3_ids"))
            return True
        except sa.exc.DBAPIError as exc:
            assert db.error_code(exc) == 1146, exc  # no such table: v3 never ran in this session
            return False

    with db.connect(eng) as conn:
        if dialect == "postgresql":
            conn.execute(sa.text("SET LOCAL track_functions = 'pl'"))
        else:  # a pooled session may have run v3 before
            conn.execute(sa.text("DROP TEMPORARY TABLE IF EXISTS claim_tis_v3_ids"))
        idle = claim(conn, ["a", "zz"])
        idle_columns, idle_rows = list(idle.keys()), idle.all()
        assert idle_rows == [] and not entered_v3(conn)
        busy = claim(conn, ["a", "b"])
        busy_columns, busy_rows = list(busy.keys()), busy.all()
        assert [r.ti_id for r in busy_rows] == [tis[0]] and entered_v3(conn)
    assert idle_columns == busy_columns
