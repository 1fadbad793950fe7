"""When a schedule fires: cron expressions, their next fire time, and the missed-fire policy.

Pure functions over times (UTC, whole seconds), so they are tested without a clock. Cron
syntax is croniter's: five fields (minute hour day-of-month month day-of-week), `@daily`
and friends, and an optional sixth field for seconds, written LAST (croniter's order, not
Quartz's): `* * * * * */10` fires every ten seconds.

Missed firings: a fire time is on time while it is at most `LATE_S` old when the scheduler
sees it (a tick, a restart). Older ones came due while no scheduler ran: `catchup: once`
fires once, for the latest of them; `catchup: skip` fires nothing and waits for the next.
Never a backlog: however many were missed, at most one run is queued for them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from croniter import croniter

from fleetval.vocab import Catchup

LATE_S = 60.0  # a fire time this late still fires, whatever `catchup` says
SECONDS_FIELD = 5  # croniter's index of the optional seconds field
NICKNAMES = ("yearly", "annually", "monthly", "weekly", "daily", "midnight", "hourly")
# Each field's values, as croniter reads them (names lower case).
_MONTHS = "jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec"
_FIELDS = (
    "[0-5]?[0-9]",  # minute
    "[01]?[0-9]|2[0-3]",  # hour
    "0?[1-9]|[12][0-9]|3[01]",  # day of month
    f"0?[1-9]|1[0-2]|{_MONTHS}",  # month
    "[0-7]|sun|mon|tue|wed|thu|fri|sat",  # day of week
)


# NOTE: a field lists at most 60 items (every minute or second); the bound is the pattern's,
# not a maxLength: a schema-driven client (schemathesis) draws from a pattern with a
# maxLength ~10x slower, and the pattern alone then bounds the text (~4 KB).
MAX_ITEMS = 60


def _field(values: str) -> str:
    """A cron field: `*` or values and ranges, each with an optional step, comma-separated."""
    item = f"(?:\\*|(?:{values})(?:-(?:{values}))?)(?:/[1-9][0-9]?)?"
    return f"{item}(?:,{item}){{0,{MAX_ITEMS - 1}}}"


def cron_pattern(*, seconds_list: bool = True) -> str:
    """The cron expressions a schedule may have, as a regular expression (the API's schema
    publishes it): a nickname, or five fields and an optional sixth for seconds, which with
    `seconds_list` False is one value (where no firing may come sooner than a minute)."""
    seconds = _field(_FIELDS[0]) if seconds_list else f"(?:{_FIELDS[0]})"
    fields = " ".join(_field(v) for v in _FIELDS)
    return f"^(?:@(?:{'|'.join(NICKNAMES)})|{fields}(?: {seconds})?)$"


class CronError(ValueError):
    """A cron expression croniter cannot read, or one that fires too often."""


@dataclass(frozen=True)
class Firing:
    """What one look at a due schedule decides."""

    fire_at: datetime | None  # the fire time to run for; None: nothing runs now
    next_fire: datetime  # the first fire time after `now`
    missed: bool  # fire times came due while no scheduler ran


def _cron(expr: str, start: datetime) -> croniter:
    try:
        return croniter(expr, start)
    except (ValueError, KeyError) as err:  # NOTE: croniter raises KeyError for some bad names
        raise CronError(f"{expr!r} is not a cron expression: {err}") from err


def min_interval_s(expr: str) -> float:
    """The shortest gap between two firings (a lower bound: minutes apart unless a seconds
    field names several seconds, then the closest two of them)."""
    fields = _cron(expr, datetime.now(UTC)).expanded
    if len(fields) <= SECONDS_FIELD:
        return 60.0
    seconds = fields[SECONDS_FIELD]
    values = list(range(60)) if seconds == ["*"] else sorted(int(s) for s in seconds)
    if len(values) == 1:
        return 60.0
    gaps = [b - a for a, b in itertools.pairwise(values)]
    return float(min([*gaps, values[0] + 60 - values[-1]]))


def validate(expr: str, min_interval: float) -> None:
    """CronError naming the problem: unreadable, never firing (30 February), or firing more
    often than allowed."""
    try:
        next_after(expr, datetime.now(UTC))
    except ValueError as err:  # NOTE: croniter's CroniterBadDateError: no such date, ever
        raise CronError(f"{expr!r} never fires: {err}") from err
    gap = min_interval_s(expr)
    if gap < min_interval:
        raise CronError(
            f"{expr!r} fires every {gap:g} s; this service allows one firing per "
            f"{min_interval:g} s at most (min_schedule_interval_s)"
        )


def _whole(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(microsecond=0)


def next_after(expr: str, t: datetime) -> datetime:
    """The first fire time strictly after `t`."""
    return _cron(expr, _whole(t)).get_next(datetime).astimezone(UTC)


def latest_at(expr: str, t: datetime) -> datetime:
    """The last fire time at or before `t`."""
    return _cron(expr, _whole(t) + timedelta(seconds=1)).get_prev(datetime).astimezone(UTC)


def decide(expr: str, due: datetime, now: datetime, catchup: Catchup) -> Firing:
    """For a schedule whose stored next fire time `due` has come (due <= now): the fire time
    to run for, if any, and the next one to store."""
    latest = latest_at(expr, now)
    nxt = next_after(expr, now)
    if latest < due:  # NOTE: `due` is not a fire time of `expr` (cannot come from the DB)
        return Firing(None, nxt, missed=False)
    late = (now - latest).total_seconds() > LATE_S
    if not late:
        return Firing(latest, nxt, missed=latest > due)
    return Firing(latest if catchup == Catchup.ONCE else None, nxt, missed=True)


def stamp(t: datetime) -> str:
    """A fire time as stored and compared: UTC ISO 8601 to the second (sorts as text)."""
    return _whole(t).isoformat()


def parse_stamp(text: str) -> datetime:
    return datetime.fromisoformat(text)
