"""cron_next_v1 / cron_next_v2 / cron_prev_v1 (the database's cron) agree with croniter on random
expressions (cron_next_v2 only adds the 9999-01-01 horizon: tests/test_bad_values.py)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from croniter import croniter
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine.dag import normalise_schedule
from engine.errors import EngineError

BOUNDS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]


@st.composite
def field(draw, lo, hi):
    def item():
        kind = draw(st.sampled_from(["*", "*/n", "a", "a-b", "a-b/n"]))
        a = draw(st.integers(lo, hi))
        # croniter mishandles a degenerate range such as "0-0" in day-of-week (it matches
        # every day); the database treats it as the single value, so ranges here are proper.
        b = draw(st.integers(min(a + 1, hi), hi))
        n = draw(st.integers(1, max(1, (hi - lo) // 2)))
        return {"*": "*", "*/n": f"*/{n}", "a": str(a), "a-b": f"{a}-{b}" if b > a else str(a),
                "a-b/n": f"{a}-{b}/{n}" if b > a else str(a)}[kind]
    return ",".join(item() for _ in range(draw(st.integers(1, 2))))


@st.composite
def crons(draw):
    return " ".join(draw(field(lo, hi)) for lo, hi in BOUNDS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(expr=crons(), starts=st.lists(st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1)),
                                     min_size=1, max_size=4))
def test_database_cron_matches_croniter(eng, expr, starts):
    try:
        cron = normalise_schedule(expr)
    except EngineError:  # e.g. "* * 30 2 *" never fires: refused at sync, see below
        assume(False)
    with eng.connect() as c:
        for start in starts:
            t = start.replace(second=0, microsecond=0, tzinfo=timezone.utc)
            nxt, nxt2, prv = c.execute(sa.text("SELECT cron_next_v1(:e, :t), cron_next_v2(:e, :t), cron_prev_v1(:e, :t)"),
                                       {"e": cron, "t": t}).one()
            assert nxt2 == nxt, (cron, t)
            it = croniter(cron, t)
            expected_next = it.get_next(datetime)
            if expected_next - t < timedelta(days=365 * 4):
                assert nxt == expected_next, (cron, t)
            expected_prev = croniter(cron, t + timedelta(seconds=1)).get_prev(datetime)
            if t - expected_prev < timedelta(days=365 * 4):
                assert prv == expected_prev, (cron, t)


def test_presets_and_names(eng):
    with eng.connect() as c:
        t = datetime(2026, 5, 13, 10, 17, tzinfo=timezone.utc)  # a Wednesday
        for expr, expected in [("@daily", datetime(2026, 5, 14, tzinfo=timezone.utc)),
                               ("@hourly", datetime(2026, 5, 13, 11, tzinfo=timezone.utc)),
                               ("0 9 * * MON", datetime(2026, 5, 18, 9, tzinfo=timezone.utc)),
                               ("30 6 1 JAN-MAR *", datetime(2027, 1, 1, 6, 30, tzinfo=timezone.utc))]:
            got = c.execute(sa.text("SELECT cron_next_v1(:e, :t)"), {"e": normalise_schedule(expr), "t": t}).scalar()
            assert got == expected, expr


def test_a_schedule_that_never_fires_is_refused():
    import pytest
    with pytest.raises(EngineError, match="never fires"):
        normalise_schedule("0 0 30 2 *")
