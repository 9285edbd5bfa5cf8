"""Cron parsing, conversion to KFP's 6-field UTC cron and Vertex's TZ= form, next runs."""

from __future__ import annotations

import datetime as dt

import pytest

from gkeflow.pipelines.settings.cron import (
    CronError,
    CronExpression,
    kfp_cron,
    kfp_cron_to_five_fields,
    next_runs,
    split_vertex_cron,
    vertex_cron,
)

UTC = dt.UTC
WINTER = dt.datetime(2026, 1, 15, 12, tzinfo=UTC)
SUMMER = dt.datetime(2026, 7, 15, 12, tzinfo=UTC)


@pytest.mark.parametrize("text, message", [
    ("0 2 * *", "has 4 fields; expected 5"),
    ("0 2 * * * *", "has 6 fields"),
    ("60 2 * * *", "minute field: 60 is outside 0-59"),
    ("0 24 * * *", "hour field: 24 is outside 0-23"),
    ("0 2 0 * *", "day-of-month field: 0 is outside 1-31"),
    ("0 2 * 13 *", "month field: 13 is outside 1-12"),
    ("0 2 * * 8", "day-of-week field: 8 is outside 0-6"),
    ("*/0 2 * * *", "step '0' must be a positive number"),
    ("0 5-2 * * *", "range '5-2' goes backwards"),
    ("0 x * * *", "hour field: 'x' is not a number"),
    ("0 2 * * FUNDAY", "or one of SUN, MON"),
    ("0 1,,2 * * *", "empty list item"),
    ("0 0 30 2 *", "never runs: none of the months it names has day 30"),
    ("0 0 31 4,6,9,11 *", "never runs: none of the months it names has day 31"),
])
def test_bad_crons_are_explained(text, message):
    with pytest.raises(CronError, match=message.replace("*", r"\*")):
        CronExpression.parse(text)


@pytest.mark.parametrize("text", ["0 0 29 2 *", "0 0 31 * *", "0 0 30 2 MON"])
def test_crons_that_run_on_some_day_are_kept(text):
    assert CronExpression.parse(text).text == text


def test_names_ranges_steps_and_sunday_as_7():
    expr = CronExpression.parse("*/20 9-17/4 1,15 JAN-MAR mon-fri")
    assert expr.minutes == {0, 20, 40} and expr.hours == {9, 13, 17}
    assert expr.days == {1, 15} and expr.months == {1, 2, 3}
    assert expr.weekdays == {1, 2, 3, 4, 5}
    assert CronExpression.parse("0 0 * * 7").weekdays == {0}
    assert CronExpression.parse("0 0 * * 5-7").weekdays == {5, 6, 0}


def test_utc_is_only_given_a_seconds_field():
    assert kfp_cron("*/15 3 * * 1-5", "UTC", at=WINTER).cron == "0 */15 3 * * 1-5"


def test_daylight_saving_zone_uses_the_offset_in_force():
    """02:00 in Berlin is 01:00 UTC in winter (CET) and 00:00 UTC in summer (CEST)."""
    winter = kfp_cron("0 2 * * *", "Europe/Berlin", at=WINTER)
    summer = kfp_cron("0 2 * * *", "Europe/Berlin", at=SUMMER)
    assert (winter.cron, winter.utc_offset_minutes, winter.exact) == ("0 0 1 * * *", 60, False)
    assert (summer.cron, summer.utc_offset_minutes) == ("0 0 0 * * *", 120)
    # The documented consequence: the winter conversion runs at 03:00 local in summer.
    after = dt.datetime(2026, 4, 1, tzinfo=UTC)
    (run,) = next_runs(kfp_cron_to_five_fields(winter.cron), "UTC", 1, after)
    assert run.astimezone(dt.timezone(dt.timedelta(hours=2))).hour == 3


def test_west_of_utc_and_steps():
    assert kfp_cron("0 */2 * * *", "America/New_York", at=WINTER).cron == "0 0 1-23/2 * * *"
    assert kfp_cron("0 20 * * *", "America/New_York", at=SUMMER).cron == "0 0 0 * * *"


def test_day_of_week_moves_with_the_day():
    # 00:30 Monday-Friday in Berlin (winter) is 23:30 Sunday-Thursday in UTC.
    assert kfp_cron("30 0 * * 1-5", "Europe/Berlin", at=WINTER).cron == "0 30 23 * * 0-4"
    # 22:00 Saturday in New York (winter) is 03:00 Sunday in UTC.
    assert kfp_cron("0 22 * * 6", "America/New_York", at=WINTER).cron == "0 0 3 * * 0"


def test_fractional_offsets_without_daylight_saving_are_exact():
    converted = kfp_cron("15 9 * * *", "Asia/Kolkata", at=WINTER)
    assert (converted.cron, converted.exact) == ("0 45 3 * * *", True)
    assert kfp_cron("*/15 * * * *", "Asia/Kolkata", at=WINTER).cron == "0 */15 * * * *"


@pytest.mark.parametrize("cron, zone, message", [
    ("0 0,12 * * 1", "Asia/Kolkata", "some of its times fall on the previous or next day"),
    ("0 0 1 * *", "Europe/Berlin", "a day-of-month or month cannot be moved"),
    ("30 0 * 6 *", "Europe/Berlin", "a day-of-month or month cannot be moved"),
    ("15,45 9 * * *", "Asia/Kolkata", "its minutes land in different UTC hours"),
])
def test_conversions_without_a_single_utc_equivalent_are_refused(cron, zone, message):
    with pytest.raises(CronError, match=message):
        kfp_cron(cron, zone, at=WINTER)


def test_day_of_month_is_fine_when_the_day_does_not_change():
    assert kfp_cron("0 12 1 * *", "Europe/Berlin", at=WINTER).cron == "0 0 11 1 * *"


def test_vertex_keeps_five_fields_and_the_zone():
    assert vertex_cron("0  2 * * *", "Europe/Berlin") == "TZ=Europe/Berlin 0 2 * * *"
    assert split_vertex_cron("TZ=Europe/Berlin 0 2 * * *") == ("0 2 * * *", "Europe/Berlin")
    assert split_vertex_cron("CRON_TZ=Asia/Tokyo 5 4 * * *") == ("5 4 * * *", "Asia/Tokyo")
    assert split_vertex_cron("5 4 * * *") == ("5 4 * * *", "UTC")
    with pytest.raises(CronError, match="unknown time zone 'Mars/Olympus'"):
        vertex_cron("0 2 * * *", "Mars/Olympus")


def test_next_runs_skip_the_spring_gap_and_run_the_autumn_repeat_once():
    spring = next_runs("30 2 * * *", "Europe/Berlin", 3, dt.datetime(2026, 3, 27, tzinfo=UTC))
    assert [r.day for r in spring] == [27, 28, 30]  # 2026-03-29 02:30 does not exist
    autumn = next_runs("30 2 * * *", "Europe/Berlin", 3, dt.datetime(2026, 10, 24, tzinfo=UTC))
    assert [r.day for r in autumn] == [24, 25, 26]
    assert autumn[1].utcoffset() == dt.timedelta(hours=2)  # the first 02:30 (CEST)


def test_next_runs_use_or_when_both_day_fields_are_restricted():
    runs = next_runs("0 9 13 * 5", "UTC", 4, dt.datetime(2026, 2, 1, tzinfo=UTC))
    assert [(r.month, r.day) for r in runs] == [(2, 6), (2, 13), (2, 20), (2, 27)]
    runs = next_runs("0 9 13 * *", "UTC", 2, dt.datetime(2026, 2, 1, tzinfo=UTC))
    assert [(r.month, r.day) for r in runs] == [(2, 13), (3, 13)]
