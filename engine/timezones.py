"""Time zones for cron schedules: `DAG(timezone="Europe/Berlin")`.

The database evaluates cron in a DAG's zone (cron_next_v3 / cron_prev_v3) from the table
`tz_offset`: one row per period of a zone, (zone, utc_from, utc_offset seconds east of UTC),
the offset in force from that UTC instant until the next row's. `engine dags sync` writes the
rows of every zone the synced DAGs use, computed here from Python's zoneinfo (the IANA
database of the system or the `tzdata` package), so both dialects read the same transitions
and MariaDB needs no time zone tables of its own. 'UTC' needs no rows.

The rows cover 1970 to 2200: the first row (utc_from 1000-01-01) holds the offset in force on
1970-01-01, later offsets change where zoneinfo says; after the last transition before 2200
the offset stays as it is then.
"""
from __future__ import annotations

import functools
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, available_timezones

from engine import db, validate
from engine.errors import EngineError

UTC = "UTC"
FIRST = datetime(1000, 1, 1, tzinfo=timezone.utc)   # the first row's utc_from: before every date the engine stores
SCAN_FROM = datetime(1970, 1, 1, tzinfo=timezone.utc)
SCAN_TO = datetime(2200, 1, 1, tzinfo=timezone.utc)
MAX_NAME = 64


@functools.cache
def _known() -> frozenset[str]:
    return frozenset(available_timezones()) | {UTC}


def check_zone(value, where: str = "") -> str:
    """A known IANA zone name ('Europe/Berlin', 'UTC'), or EngineError naming the fix."""
    if not isinstance(value, str) or len(value) > MAX_NAME or value not in _known():
        shown = value if not isinstance(value, str) or len(value) <= 60 else value[:60] + "..."
        raise EngineError(f"{validate._where(where)}unknown time zone {shown!r}; use an IANA zone name such as "
                          "'UTC' or 'Europe/Berlin' (python -c 'import zoneinfo; print(zoneinfo.available_timezones())')")
    return value


@functools.cache
def periods(name: str) -> tuple[tuple[datetime, int], ...]:
    """((utc_from, offset seconds), ...) of zone `name`, oldest first, as tz_offset holds them."""
    zone = ZoneInfo(name)

    def offset(t: datetime) -> int:
        return int(t.astimezone(zone).utcoffset().total_seconds())

    found = [(FIRST, offset(SCAN_FROM))]
    step, t = timedelta(days=1), SCAN_FROM
    while t < SCAN_TO:  # no zone changes its offset twice within a day
        if offset(t + step) != found[-1][1]:
            lo, hi = t, t + step  # offset(lo) is the old one, offset(hi) the new: bisect to the second
            while hi - lo > timedelta(seconds=1):
                mid = lo + timedelta(seconds=(hi - lo).total_seconds() // 2)
                lo, hi = (mid, hi) if offset(mid) == found[-1][1] else (lo, mid)
            found.append((hi, offset(hi)))
        t += step
    return tuple(found)


def store(conn, zones) -> None:
    """Write the tz_offset rows of `zones` the table does not hold already (inside the sync's
    transaction); a zone whose rows changed (a newer tzdata) is rewritten."""
    for name in sorted(set(zones) - {UTC}):
        want = periods(name)
        have = [(r.utc_from.replace(tzinfo=r.utc_from.tzinfo or timezone.utc), r.utc_offset)
                for r in db.run(conn, "tz_offsets_get", zone=name)]
        if have == list(want):
            continue
        db.run(conn, "tz_offsets_put", zone=name, utc_froms=[f.isoformat() for f, _ in want],
               offsets=[o for _, o in want])
