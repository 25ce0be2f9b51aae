"""Schedulers call queue_tis at once while two completers claim and finish: no limit is ever
exceeded and no TI is queued twice (checked in SQL after every step of every process).

Also rolling upgrades (schedulers of earlier releases calling queue_tis_v1 and queue_tis_v2
beside new ones calling queue_tis_v3; queue_tis_v7, v10 and v26 beside the named query's v27,
one database: on MySQL/MariaDB v7 sums the active TIs while v10 (v9) reads the usage counters, v26
keeps skip entries (gate and log), copying only the full partitions' counters, appending its
final UPDATE's usage itself, dropping the rows past what their group can take, with its small
scratch tables in MEMORY, its partitions numbered per group, its fold (fold_usage_v2) and its
deletes of shared rows led by its own copies, and v27 calls v26 with aging off (as here; with
aging on it runs v9's walk folding with v2); on PostgreSQL v7 ends a batch at every full page,
v10 at check points, and v26 and v27 call v25, which keeps skip entries, drops the rows past what
their group can take, numbers the partitions once per group, starts its pages at the factor its
session's last call left, reads a refused head's reasons only where the head is long enough for
an entry, counts its check points over its candidates and plans v23's statements with merge joins
off; (v16 beside v17, v17 beside v18, v18 beside v19, v19 beside v20, v20 beside v21, v21 beside
v22, v22 beside v23, v23 beside v24, v23 beside v25 and v25 beside v26 were the cases of the
releases before);
the entries
are made here from a single refused TI (engine.skip_min 1 for the database, @engine_skip_min 1
for each MySQL session) while the others queue and finish TIs under them), and the named query's
version alone on ids that collide when joined with '.'."""
import pytest
import sqlalchemy as sa

from engine import db

from tests.race import race, setup_world

CASES = {
    "current": dict(versions=(None,), dotted=False),
    "v1-v2-v3": dict(versions=(1, 2, 3, 3), dotted=False),
    "v7-v10-v26-v27": dict(versions=(7, 10, 26, None), dotted=False, skip_min=1),
    "dotted-ids": dict(versions=(None,), dotted=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_racing_schedulers_never_exceed_a_limit_or_queue_twice(eng, db_url, case):
    setup_world(eng, n_tis=400, dotted=CASES[case]["dotted"])
    if "skip_min" in CASES[case] and db.dialect_dir(eng) == "postgresql":
        with eng.begin() as c:   # every session's default (queue_tis_v11 clears it for its call only)
            c.execute(sa.text(f"DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET engine.skip_min = %s', "
                              f"current_database(), {int(CASES[case]['skip_min'])}); END $$"))
    session_sql = ""
    if "skip_min" in CASES[case] and db.dialect_dir(eng) == "mysql":
        session_sql = f"SET @engine_skip_min = {int(CASES[case]['skip_min'])}"
    result = race(db_url, seconds=8, schedulers=4, completers=2, versions=CASES[case]["versions"],
                  session_sql=session_sql,
                  enough="SELECT (SELECT count(*) FROM task_instance WHERE state <> 'scheduled') > 50 "
                         "AND (SELECT count(*) FROM task_instance WHERE state = 'success') > 0")
    assert result["exit_codes"] == [0] * 6
    assert result["violations"] == []
    assert result["queued"] == result["distinct_queued"] > 50
    assert result["finished"] > 0
    with eng.connect() as c:
        in_db = c.execute(sa.text("SELECT count(*) FROM task_instance WHERE state <> 'scheduled'")).scalar()
        assert c.execute(sa.text("SELECT count(*) FROM limit_usage WHERE used > cap")).scalar() == 0
        assert c.execute(sa.text("SELECT * FROM usage_drift")).all() == []  # the counters kept up
    assert in_db == result["queued"]  # every queue event is one TI that left 'scheduled'
