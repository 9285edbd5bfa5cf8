"""Cron expressions: parse the 5-field form, convert it for each target, compute next runs.

``gkeflow.yaml`` schedules use the familiar 5-field cron (minute hour day-of-month month
day-of-week) plus an IANA time zone. The targets want different things:

* **Vertex AI** takes the 5 fields with a ``TZ=Area/City`` prefix and applies the time zone
  itself, daylight-saving changes included (:func:`vertex_cron`).
* **Kubeflow Pipelines** takes **six** fields (seconds first) and always runs them in
  **UTC** (:func:`kfp_cron`). A local time is turned into UTC with the zone's UTC offset
  *at the moment of conversion* (``gkeflow schedule apply``).

Daylight saving time on Kubeflow Pipelines
------------------------------------------
A UTC cron cannot follow a zone whose offset changes. ``0 2 * * *`` in Europe/Berlin,
converted in winter (UTC+1), becomes ``0 0 1 * * *``: 02:00 local until the last Sunday of
March, then 03:00 local (still 01:00 UTC) until it is converted again. Each conversion
records the offset it used, the offset is part of the schedule's fingerprint, so running
``gkeflow schedule apply`` after the change (e.g. from a daily CI job) replaces the recurring
run with one at the new offset; ``gkeflow schedule list`` marks a schedule whose offset is
out of date. Zones without daylight saving (UTC, Asia/Tokyo, Asia/Kolkata...) convert
exactly and never go stale.

A conversion that would need different UTC days for different local times (e.g. ``30 0,23
1 * *`` from a zone east of UTC, where one run moves to the previous day and the other does
not, or a day-of-month run that moves across a month boundary) cannot be one UTC cron and is
refused with an error that says so; day-of-week schedules move with the day.

Vertex applies the zone itself: a local time skipped by the spring change (e.g. 02:30 in
Europe/Berlin on the last Sunday of March) and a repeated one in autumn are handled by
Vertex's scheduler; :func:`next_runs` skips a skipped local time and runs a repeated one once
(its first occurrence). Avoid scheduling inside the changeover hour if that matters.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_FIELDS = (
    # name, low, high, aliases
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {n: i + 1 for i, n in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"])}),
    ("day-of-week", 0, 6,
     {n: i for i, n in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}),
)


class CronError(ValueError):
    """A cron expression or time zone is invalid, or cannot be converted for a target."""


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; a clear :class:`CronError` if there is none."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise CronError(f"unknown time zone {name!r}; use an IANA name such as "
                        "'UTC', 'Europe/Berlin' or 'America/New_York'") from None


def _parse_value(token: str, field: tuple) -> int:
    name, low, high, aliases = field
    upper = token.upper()
    if upper in aliases:
        return aliases[upper]
    if not token.isdigit():
        raise CronError(f"{name} field: {token!r} is not a number"
                        + (f" or one of {', '.join(aliases)}" if aliases else ""))
    value = int(token)
    if name == "day-of-week" and value == 7:
        return 0
    if not low <= value <= high:
        raise CronError(f"{name} field: {value} is outside {low}-{high}")
    return value


def _parse_field(text: str, field: tuple) -> frozenset[int]:
    name, low, high, _ = field
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronError(f"{name} field: empty list item in {text!r}")
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"{name} field: step {step_text!r} must be a positive number")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = _parse_value(first, field), _parse_value(last, field)
            if name == "day-of-week" and last == "7":
                end = 7 if start > 0 else 6
            if start > end:
                raise CronError(f"{name} field: range {base!r} goes backwards")
        else:
            start = _parse_value(base, field)
            end = high if step_text else start
        values.update(v % 7 if name == "day-of-week" else v for v in range(start, end + 1, step))
    return frozenset(values)


#: The most days each month can have (February: in a leap year).
_LONGEST_MONTH = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31,
                  11: 30, 12: 31}


@dataclass(frozen=True)
class CronExpression:
    """A parsed 5-field cron expression (Vixie semantics: when both day fields are
    restricted, a day matches if either matches)."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    fields: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> CronExpression:
        fields = tuple(text.split())
        if len(fields) != 5:
            raise CronError(
                f"cron {text!r} has {len(fields)} fields; expected 5: minute hour "
                "day-of-month month day-of-week (e.g. '0 2 * * *'); put the time zone in "
                "time_zone, not in the cron")
        parsed = [_parse_field(f, spec) for f, spec in zip(fields, _FIELDS, strict=True)]
        expression = cls(" ".join(fields), *parsed, fields)
        if expression.day_of_month_restricted and not expression.weekday_restricted and not any(
                day <= _LONGEST_MONTH[month] for month in expression.months
                for day in expression.days):
            raise CronError(f"cron {text!r} never runs: none of the months it names has day "
                            f"{', '.join(map(str, sorted(expression.days)))}; pick days the "
                            "named months have")
        return expression

    @property
    def day_of_month_restricted(self) -> bool:
        return self.fields[2] != "*"

    @property
    def weekday_restricted(self) -> bool:
        return self.fields[4] != "*"

    def matches_day(self, day: dt.date) -> bool:
        if day.month not in self.months:
            return False
        in_days = day.day in self.days
        in_weekdays = (day.isoweekday() % 7) in self.weekdays
        if self.day_of_month_restricted and self.weekday_restricted:
            return in_days or in_weekdays
        return in_days and in_weekdays


def _render(values: frozenset[int] | set[int], low: int, high: int) -> str:
    """Compact cron text for a set of values: ``*``, ``a-b/s``, ``a-b``, or a list."""
    ordered = sorted(values)
    if ordered == list(range(low, high + 1)):
        return "*"
    if len(ordered) >= 3:
        step = ordered[1] - ordered[0]
        if all(b - a == step for a, b in itertools.pairwise(ordered)):
            if step == 1:
                return f"{ordered[0]}-{ordered[-1]}"
            if ordered[0] - step < low and ordered[-1] + step > high:
                return f"{ordered[0]}-{high}/{step}" if ordered[0] else f"*/{step}"
            return f"{ordered[0]}-{ordered[-1]}/{step}"
    return ",".join(str(v) for v in ordered)


@dataclass(frozen=True)
class KfpCron:
    """A 6-field UTC cron for Kubeflow Pipelines and the offset it was converted with."""

    cron: str
    utc_offset_minutes: int
    exact: bool  # True when the zone's offset never changes (no daylight saving)


def utc_offset_minutes(time_zone: str, at: dt.datetime) -> int:
    """Minutes the zone is ahead of UTC at ``at`` (an aware datetime)."""
    offset = at.astimezone(zone(time_zone)).utcoffset()
    return int(offset.total_seconds() // 60)


def _zone_has_fixed_offset(time_zone: str, year: int) -> bool:
    tz = zone(time_zone)
    offsets = {dt.datetime(year, month, 15, 12, tzinfo=tz).utcoffset() for month in range(1, 13)}
    return len(offsets) == 1


def kfp_cron(cron: str, time_zone: str, at: dt.datetime | None = None) -> KfpCron:
    """Convert a 5-field cron in ``time_zone`` into KFP's 6-field UTC cron.

    The zone's UTC offset at ``at`` (default: now) is used; see the module docstring for what
    that means across daylight-saving changes. Raises :class:`CronError` when no single UTC
    cron has the same meaning.
    """
    expr = CronExpression.parse(cron)
    at = at or dt.datetime.now(dt.UTC)
    offset = utc_offset_minutes(time_zone, at)
    exact = _zone_has_fixed_offset(time_zone, at.year)
    if offset == 0:
        return KfpCron(f"0 {' '.join(expr.fields)}", 0, exact)
    pairs = set()
    day_shifts = set()
    for hour in expr.hours:
        for minute in expr.minutes:
            total = hour * 60 + minute - offset
            day_shifts.add(total // 1440)
            total %= 1440
            pairs.add((total // 60, total % 60))
    utc_hours = {h for h, _ in pairs}
    utc_minutes = {m for _, m in pairs}
    where = f"cron {cron!r} in {time_zone} (UTC{offset / 60:+g}h)"
    if len(pairs) != len(utc_hours) * len(utc_minutes):
        raise CronError(f"{where} has no single UTC equivalent: its minutes land in different "
                        "UTC hours; choose minutes that stay within one hour in UTC, or use "
                        "time_zone: UTC")
    day_fields = list(expr.fields[2:])
    restricted_days = expr.day_of_month_restricted or expr.fields[3] != "*"
    if restricted_days or expr.weekday_restricted:
        if len(day_shifts) > 1:
            raise CronError(f"{where} has no single UTC equivalent: some of its times fall on "
                            "the previous or next day in UTC and others do not; split it into "
                            "two schedules or use time_zone: UTC")
        (shift,) = day_shifts
        if shift and restricted_days:
            raise CronError(f"{where} has no single UTC equivalent: its runs move to another "
                            "day in UTC, and a day-of-month or month cannot be moved by a day "
                            "in cron (month lengths differ); use time_zone: UTC or a time "
                            "that is on the same day in UTC")
        if shift and expr.weekday_restricted:
            day_fields[2] = _render({(d + shift) % 7 for d in expr.weekdays}, 0, 6)
    minute_text = _render(utc_minutes, 0, 59) if utc_minutes != set(expr.minutes) \
        else expr.fields[0]
    hour_text = _render(utc_hours, 0, 23) if utc_hours != set(expr.hours) else expr.fields[1]
    return KfpCron(f"0 {minute_text} {hour_text} {' '.join(day_fields)}", offset, exact)


def vertex_cron(cron: str, time_zone: str) -> str:
    """Vertex AI's form: ``TZ=<zone> <5 fields>`` (``UTC`` keeps the prefix for clarity)."""
    expr = CronExpression.parse(cron)
    zone(time_zone)
    return f"TZ={time_zone} {expr.text}"


def split_vertex_cron(text: str) -> tuple[str, str]:
    """``TZ=Europe/Berlin 0 2 * * *`` -> (``0 2 * * *``, ``Europe/Berlin``)."""
    head, _, rest = text.strip().partition(" ")
    for prefix in ("TZ=", "CRON_TZ="):
        if head.startswith(prefix):
            return rest.strip(), head[len(prefix):]
    return text.strip(), "UTC"


def kfp_cron_to_five_fields(cron: str) -> str:
    """Drop the seconds field of a 6-field KFP cron (only second 0 is supported)."""
    fields = cron.split()
    if len(fields) != 6:
        raise CronError(f"KFP cron {cron!r} does not have 6 fields")
    if fields[0] != "0":
        raise CronError(f"KFP cron {cron!r}: only second 0 is supported")
    return " ".join(fields[1:])


def next_runs(cron: str, time_zone: str, count: int = 3,
              after: dt.datetime | None = None) -> list[dt.datetime]:
    """The next ``count`` run times (aware, in ``time_zone``) strictly after ``after``.

    Local times skipped by a daylight-saving change are skipped; repeated ones run once.
    """
    expr = CronExpression.parse(cron)
    tz = zone(time_zone)
    after = (after or dt.datetime.now(dt.UTC)).astimezone(tz)
    results: list[dt.datetime] = []
    day = after.date()
    for _ in range(366 * 8):
        if expr.matches_day(day):
            for hour in sorted(expr.hours):
                for minute in sorted(expr.minutes):
                    naive = dt.datetime(day.year, day.month, day.day, hour, minute)
                    local = naive.replace(tzinfo=tz, fold=0)
                    # A time in a spring-forward gap does not round-trip through UTC.
                    if local.astimezone(dt.UTC).astimezone(tz).replace(
                            tzinfo=None) != naive:
                        continue
                    if local > after:
                        results.append(local)
                        if len(results) == count:
                            return results
        day += dt.timedelta(days=1)
    return results
