"""DAG(timezone=...): cron_next_v3 / cron_prev_v3 read a schedule in an IANA zone across DST,
as croniter does with zoned datetimes, on both dialects, from the tz_offset rows `dags sync`
writes; create_dag_runs_v3 and backfill_v2 use the DAG's zone; logical dates stay UTC."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from croniter import croniter
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine import db, timezones
from engine.dag import DAG, normalise_schedule
from engine.errors import EngineError
from tests.helpers import sql, sync_source, tick
from tests.test_cron import crons

UTC = timezone.utc
# DST in the north and the south, a half-hour zone without DST, a half-hour zone with DST, a
# zone whose DST moves the clock by 30 minutes, a zone that gave up DST, and UTC.
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "America/Santiago", "Asia/Kolkata",
         "Australia/Adelaide", "Australia/Lord_Howe", "Europe/Moscow", "UTC"]


def store_zones(eng, zones=ZONES):
    with db.connect(eng) as conn:
        timezones.store(conn, zones)


def utc(value):
    return None if value is None else (value if value.tzinfo else value.replace(tzinfo=UTC))


def transitions_near(zone: str) -> list[datetime]:
    """The zone's transitions 2020-2030 (where DST bugs live)."""
    return [f for f, _ in timezones.periods(zone) if datetime(2020, 1, 1, tzinfo=UTC) <= f < datetime(2030, 1, 1, tzinfo=UTC)]


@st.composite
def instants(draw, zone):
    """A minute in 2020-2030, mostly within a day of one of the zone's transitions."""
    near = transitions_near(zone)
    if near and draw(st.booleans()):
        base = draw(st.sampled_from(near))
        return base + timedelta(minutes=draw(st.integers(-26 * 60, 26 * 60)))
    return draw(st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1))).replace(
        second=0, microsecond=0, tzinfo=UTC)


# Crons whose hours and minutes meet DST changes often: few fields restricted, small steps.
hourly = st.builds(lambda m, h: f"{m} {h} * * *", st.sampled_from(["0", "30", "15,45", "*/20", "59", "0-5"]),
                   st.sampled_from(["*", "2", "1-3", "*/2", "0,2,3", "23"]))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_zoned_cron_matches_croniter(eng, data):
    zone = data.draw(st.sampled_from(ZONES), label="zone")
    expr = data.draw(st.one_of(hourly, crons()), label="expr")
    try:
        cron = normalise_schedule(expr)
    except EngineError:
        assume(False)
    store_zones(eng, [zone])
    z = ZoneInfo(zone)
    with eng.connect() as c:
        for t in data.draw(st.lists(instants(zone), min_size=1, max_size=3), label="starts"):
            nxt, prv = c.execute(sa.text("SELECT cron_next_v3(:e, :z, :t), cron_prev_v3(:e, :z, :t)"),
                                 {"e": cron, "z": zone, "t": t}).one()
            expected_next = croniter(cron, t.astimezone(z)).get_next(datetime).astimezone(UTC)
            if expected_next - t < timedelta(days=365 * 4):
                assert utc(nxt) == expected_next, (cron, zone, t)
            expected_prev = croniter(cron, (t + timedelta(seconds=1)).astimezone(z)).get_prev(datetime).astimezone(UTC)
            if t - expected_prev < timedelta(days=365 * 4):
                assert utc(prv) == expected_prev, (cron, zone, t)


def run_dates(eng, dag_id):
    rows = sql(eng, "SELECT run_id, logical_date, data_interval_end FROM dag_run WHERE dag_id = :d ORDER BY logical_date",
               d=dag_id)
    return [(r.run_id, utc(r.logical_date), utc(r.data_interval_end)) for r in rows]


def test_dst_nights_in_berlin(eng, cfg, tmp_path):
    """A daily 02:30 Berlin schedule: on the spring-forward night 02:30 does not exist and the
    run fires at the transition (03:00 CEST); on the fall-back night 02:30 comes twice and so do
    the runs. Logical dates, intervals and run ids are UTC instants."""
    sync_source(eng, tmp_path / "dags", """
        with DAG("spring", schedule="30 2 * * *", start_date="2026-03-27", timezone="Europe/Berlin",
                 catchup=True, max_active_runs=10):
            BashTask("t", bash_command="true")
        with DAG("autumn", schedule="30 2 * * *", start_date="2026-10-23", timezone="Europe/Berlin",
                 catchup=True, max_active_runs=10):
            BashTask("t", bash_command="true")
        with DAG("ny", schedule="0 9 * * *", start_date="2026-01-01", timezone="America/New_York"):
            BashTask("t", bash_command="true")
    """)
    # start_date without an offset is midnight in the DAG's zone
    assert utc(sql(eng, "SELECT start_date FROM dag WHERE dag_id = 'spring'")[0][0]) == datetime(2026, 3, 26, 23, tzinfo=UTC)
    sql(eng, "UPDATE dag SET is_paused = false")
    tick(eng, cfg, now=datetime(2026, 3, 31, 12, tzinfo=UTC))
    d = lambda *a: datetime(*a, tzinfo=UTC)  # noqa: E731
    assert run_dates(eng, "spring") == [
        ("scheduled__2026-03-27T01:30:00+00:00", d(2026, 3, 27, 1, 30), d(2026, 3, 28, 1, 30)),
        ("scheduled__2026-03-28T01:30:00+00:00", d(2026, 3, 28, 1, 30), d(2026, 3, 29, 1, 0)),   # 23 h
        ("scheduled__2026-03-29T01:00:00+00:00", d(2026, 3, 29, 1, 0), d(2026, 3, 30, 0, 30)),   # 03:00 CEST
        ("scheduled__2026-03-30T00:30:00+00:00", d(2026, 3, 30, 0, 30), d(2026, 3, 31, 0, 30)),
    ]
    # without catchup only the latest complete interval, in the zone: 09:00 EDT is 13:00 UTC
    assert [r[0] for r in run_dates(eng, "ny")] == ["scheduled__2026-03-29T13:00:00+00:00"]
    sql(eng, "UPDATE dag SET is_paused = true WHERE dag_id IN ('spring', 'ny')")
    tick(eng, cfg, now=datetime(2026, 10, 27, 12, tzinfo=UTC))
    assert run_dates(eng, "autumn") == [
        ("scheduled__2026-10-23T00:30:00+00:00", d(2026, 10, 23, 0, 30), d(2026, 10, 24, 0, 30)),
        ("scheduled__2026-10-24T00:30:00+00:00", d(2026, 10, 24, 0, 30), d(2026, 10, 25, 0, 30)),
        ("scheduled__2026-10-25T00:30:00+00:00", d(2026, 10, 25, 0, 30), d(2026, 10, 25, 1, 30)),  # 02:30 CEST
        ("scheduled__2026-10-25T01:30:00+00:00", d(2026, 10, 25, 1, 30), d(2026, 10, 26, 1, 30)),  # 02:30 CET
        ("scheduled__2026-10-26T01:30:00+00:00", d(2026, 10, 26, 1, 30), d(2026, 10, 27, 1, 30)),
    ]
    # backfill reads the same zone
    with db.connect(eng) as conn:
        db.run(conn, "backfill", dag_id="spring", start_date=d(2026, 4, 1), end_date=d(2026, 4, 2, 23),
               max_active=None, rerun_failed=False, now=None).one()
    assert [r[0] for r in run_dates(eng, "spring")[-2:]] == ["backfill__2026-04-01T00:30:00+00:00",
                                                             "backfill__2026-04-02T00:30:00+00:00"]


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../etc/passwd", "", None, 3, "Europe/Berlin\x00", "x" * 100])
def test_a_bad_timezone_is_one_line(zone):
    with pytest.raises(EngineError, match="unknown time zone .*use an IANA zone name") as e:
        DAG("d", schedule="@daily", start_date="2026-01-01", timezone=zone)
    assert "\n" not in str(e.value)


def test_sync_writes_each_zone_once_and_a_zone_without_rows_is_the_dags_error(eng, cfg, tmp_path):
    with pytest.raises(EngineError, match="dag 'bad': unknown time zone 'Europe/Berln'"):
        sync_source(eng, tmp_path / "bad", """
            with DAG("good", schedule="@daily", start_date="2026-01-01", timezone="Europe/Berlin"):
                BashTask("t", bash_command="true")
            with DAG("bad", schedule="@daily", start_date="2026-01-01", timezone="Europe/Berln"):
                BashTask("t", bash_command="true")
        """)
    assert sql(eng, "SELECT count(*) FROM dag")[0][0] == 0  # nothing written, no zone either
    assert sql(eng, "SELECT count(*) FROM tz_offset")[0][0] == 0
    src = """
        with DAG("syd", schedule="0 6 * * *", start_date="2026-01-01", timezone="Australia/Sydney"):
            BashTask("t", bash_command="true")
        with DAG("utc", schedule="0 6 * * *", start_date="2026-01-01"):
            BashTask("t", bash_command="true")
    """
    sync_source(eng, tmp_path / "dags", src)
    rows = sql(eng, "SELECT zone, count(*) AS n FROM tz_offset GROUP BY zone")
    assert [(r.zone, r.n) for r in rows] == [("Australia/Sydney", len(timezones.periods("Australia/Sydney")))]
    sync_source(eng, tmp_path / "dags", src)  # unchanged: the same rows
    assert sql(eng, "SELECT count(*) FROM tz_offset")[0][0] == len(timezones.periods("Australia/Sydney"))
    sql(eng, "UPDATE dag SET is_paused = false")
    sql(eng, "DELETE FROM tz_offset")  # as if a DBA emptied it
    tick(eng, cfg, now=datetime(2026, 2, 1, tzinfo=UTC))
    err = sql(eng, "SELECT dag_id, error FROM dag WHERE error IS NOT NULL")
    assert [r.dag_id for r in err] == ["syd"] and "has no rows in tz_offset" in err[0].error
    assert [r[0] for r in run_dates(eng, "utc")] == ["scheduled__2026-01-30T06:00:00+00:00"]  # the others go on
    sync_source(eng, tmp_path / "dags", src)  # the fix the error names
    tick(eng, cfg, now=datetime(2026, 2, 1, tzinfo=UTC))
    assert [r[0] for r in run_dates(eng, "syd")] == ["scheduled__2026-01-30T19:00:00+00:00"]  # 06:00 AEDT


def test_the_documented_dst_rules(eng):
    """docs/operations.md "DAGs in a time zone": the examples, on both dialects."""
    store_zones(eng, ["Europe/Berlin"])

    def fires(expr, after, n):
        out, t = [], after
        with eng.connect() as c:
            for _ in range(n):
                t = utc(c.execute(sa.text("SELECT cron_next_v3(:e, 'Europe/Berlin', :t)"), {"e": expr, "t": t}).scalar())
                out.append(t.strftime("%m-%d %H:%M"))
        return out
    spring, autumn = datetime(2026, 3, 28, 23, tzinfo=UTC), datetime(2026, 10, 24, 22, tzinfo=UTC)
    assert fires("30 2 * * *", spring, 2) == ["03-29 01:00", "03-30 00:30"]  # 02:30 missing: 03:00 CEST
    assert fires("30 * * * *", spring, 3) == ["03-28 23:30", "03-29 00:30", "03-29 01:30"]  # every hour: 02:30 skipped
    assert fires("30 2 * * *", autumn, 3) == ["10-25 00:30", "10-25 01:30", "10-26 01:30"]  # twice
    assert fires("0 * * * *", autumn, 5) == ["10-24 23:00", "10-25 00:00", "10-25 01:00", "10-25 02:00", "10-25 03:00"]
    with eng.connect() as c:  # cron_prev_v3 mirrors it
        prev = c.execute(sa.text("SELECT cron_prev_v3('30 2 * * *', 'Europe/Berlin', :t)"),
                         {"t": datetime(2026, 3, 29, 12, tzinfo=UTC)}).scalar()
    assert utc(prev) == datetime(2026, 3, 29, 1, tzinfo=UTC)
