"""Four schedulers call queue_tis at once while two completers claim and finish: no limit is
ever exceeded and no TI is queued twice (checked in SQL after every step of every process)."""
import sqlalchemy as sa

from tests.race import race, setup_world


def test_racing_schedulers_never_exceed_a_limit_or_queue_twice(eng, db_url):
    setup_world(eng, n_tis=400)
    result = race(db_url, seconds=8, schedulers=4, completers=2)
    assert result["exit_codes"] == [0] * 6
    assert result["violations"] == []
    assert result["queued"] == result["distinct_queued"] > 50
    assert result["finished"] > 0
    with eng.connect() as c:
        in_db = c.execute(sa.text("SELECT count(*) FROM task_instance WHERE state <> 'scheduled'")).scalar()
        assert c.execute(sa.text("SELECT count(*) FROM limit_usage WHERE used > cap")).scalar() == 0
    assert in_db == result["queued"]  # every queue event is one TI that left 'scheduled'
