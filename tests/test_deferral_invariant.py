"""No limit is ever exceeded across many defer and resume cycles, with schedulers calling
queue_tis at the same time: the invariant of queue_tis_v1 holds with fire_trigger_v1 also
queuing (a deferred TI of an include_deferred pool keeps its place in every limit)."""
import json

import sqlalchemy as sa

from tests.deferral import quoted
from tests.race import setup_world
from tests.race_defer import race


def test_defer_resume_cycles_never_exceed_a_limit(eng, db_url):
    setup_world(eng, n_tis=400)  # pools small (3), mid (5, include_deferred), big (8); every limit in play
    # The race goes on past its 6 s until the database holds enough of each kind of cycle (a
    # loaded machine gets through fewer in 6 s); the counts below are the processes' own.
    g = quoted(eng, "trigger")
    enough = (f"SELECT (SELECT count(*) FROM {g}) > 100"
              f" AND (SELECT count(*) FROM {g} WHERE event IS NOT NULL) > 60"
              f" AND (SELECT count(*) FROM {g} WHERE error IS NOT NULL) >= 5"
              " AND (SELECT count(*) FROM task_instance WHERE state = 'failed') > 0")
    result = race(db_url, seconds=6, schedulers=2, workers=2, firers=1, enough=enough)
    print(json.dumps(result, indent=1, default=str))
    assert result["exit_codes"] == [0] * 5
    assert result["violations"] == []
    # Many cycles, through both resume paths and the failure path.
    assert result["deferred"] > 50 and result["resumes_claimed"] > 20
    assert result["fired"].get("queued", 0) > 5 and result["fired"].get("scheduled", 0) > 5
    assert result["fired"].get("failed", 0) > 0
    with eng.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM limit_usage WHERE used > cap")).scalar() == 0
        assert c.execute(sa.text("SELECT * FROM usage_drift")).all() == []  # the counters kept up
        # Every deferred TI waits on a trigger that has not fired; every fired one resumed or failed.
        assert c.execute(sa.text(f"SELECT count(*) FROM task_instance ti JOIN {quoted(eng, 'trigger')} g "
                                 f"ON g.id = ti.trigger_id WHERE ti.state = 'deferred' AND g.fired_at IS NOT NULL"
                                 )).scalar() == 0
