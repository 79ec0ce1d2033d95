"""scaler/schedule.py: the cron grammar, fire times (DST, leap days), the floor, and the warmWindows key.

Expected instants are written as UTC wall times worked out by hand from the zones' rules (2026):
Europe/Berlin is UTC+1 (CET), UTC+2 (CEST) from Sunday 29 March 02:00 (clocks jump to 03:00, at 01:00Z)
to Sunday 25 October 03:00 (clocks go back to 02:00, at 01:00Z); America/New_York is UTC-5, UTC-4 from
Sunday 8 March 02:00 (-> 03:00, at 07:00Z) to Sunday 1 November 02:00 (-> 01:00, at 06:00Z).
1 January 2026 is a Thursday, so 1 July is a Wednesday (181 days later) and 6 July a Monday.
"""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from keda_llm.scaler.config import ConfigError, parse_metadata
from keda_llm.scaler.schedule import (
    MAX_DURATION,
    WarmWindow,
    floor_at,
    next_fire,
    parse_cron,
    parse_windows,
    prev_fire,
    warm_floor,
)

BERLIN, NEW_YORK, UTC = ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York"), ZoneInfo("UTC")


def z(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    """Epoch seconds of a UTC wall time."""
    return datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc).timestamp()


# ---- the grammar ----

def test_fields_lists_ranges_steps_and_names() -> None:
    c = parse_cron("*/15 9-17/4 1,15 jan,Jul MON-FRI")
    assert c.minutes == (0, 15, 30, 45)
    assert c.hours == (9, 13, 17)
    assert c.days == {1, 15} and c.months == {1, 7} and c.weekdays == {1, 2, 3, 4, 5}
    assert not c.day_star and not c.weekday_star
    assert parse_cron("0 0 * * 5-7").weekdays == {5, 6, 0}  # 7 is Sunday too
    assert parse_cron("0 0 * * sun,SAT").weekdays == {0, 6}
    assert parse_cron("  0   0 * *  *  ").text == "0 0 * * *"
    assert parse_cron("*/20 * * * *").minutes == (0, 20, 40)
    assert parse_cron("5-59/20 * * * *").minutes == (5, 25, 45)


@pytest.mark.parametrize(("macro", "same_as"), [
    ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"), ("@monthly", "0 0 1 * *"), ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"), ("@MIDNIGHT", "0 0 * * *"), ("@hourly", "0 * * * *"),
])
def test_macros(macro: str, same_as: str) -> None:
    a, b = parse_cron(macro), parse_cron(same_as)
    assert (a.minutes, a.hours, a.days, a.months, a.weekdays) == (b.minutes, b.hours, b.days, b.months, b.weekdays)


@pytest.mark.parametrize(("text", "says"), [
    ("", "has 0 fields"),
    ("0 9 * *", "has 4 fields"),
    ("0 0 9 * * *", "has 6 fields"),  # a seconds field (Quartz, robfig's optional one)
    ("60 * * * *", "minute 60 is out of range 0-59"),
    ("* 24 * * *", "hour 24 is out of range 0-23"),
    ("* * 0 * *", "day-of-month 0 is out of range 1-31"),
    ("* * 32 * *", "day-of-month 32"),
    ("* * * 13 *", "month 13"),
    ("* * * * 8", "day-of-week 8 is out of range 0-7"),
    ("* * * FOO *", "month 'FOO' is not a number in 1-12 or a name (JAN"),
    ("* * * * MON-FOO", "day-of-week 'FOO'"),
    ("* * * JAN *-5", "day-of-week '*-5'"),
    ("5/15 * * * *", "a step needs a range (write 5-59/15)"),
    ("10-5 * * * *", "the range runs backwards"),
    ("*/0 * * * *", "the step must be in 1-60"),
    ("*/61 * * * *", "the step must be in 1-60"),
    ("? * * * *", "no ?, L, W or #"),
    ("0 0 L * *", "day-of-month 'L'"),
    ("0 0 * * MON#2", "no ?, L, W or #"),
    ("0 0 15W * *", "day-of-month '15W'"),
    ("1,,2 * * * *", "minute ''"),
    ("@reboot", "unknown macro '@reboot'"),
    ("\u0663 0 * * *", "minute '\u0663': use *, N"),  # an Arabic-Indic 3: digits are ASCII here
    ("*/\u0663 * * * *", "no ?, L, W or #"),
    ("0 0 30 2 *", "never fires: day-of-month 30 does not occur in month 2"),  # February 30th
    ("0 0 31 4,6,9,11 *", "never fires"),
    ("0 0 31 APR-JUN/2 *", "never fires"),  # April and June have 30 days
    ("0 " * 200, "at most 256 characters"),
])
def test_invalid_expressions_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_cron(text)
    assert says in str(info.value)


def test_a_day_that_occurs_only_in_some_months_or_years_is_fine() -> None:
    parse_cron("0 0 31 1-12 *")
    parse_cron("0 0 29 2 *")
    parse_cron("0 0 30 2 MON")  # both day fields restricted: Mondays in February


# ---- fire times ----

def test_vixie_day_rule_either_field_when_both_are_restricted() -> None:
    both = parse_cron("0 9 1 * MON")  # the 1st OR a Monday
    t = z(2026, 6, 30, 12)
    first = next_fire(both, UTC, t)
    assert first == z(2026, 7, 1, 9)  # Wednesday the 1st: the day of month matches
    assert next_fire(both, UTC, first) == z(2026, 7, 6, 9)  # Monday the 6th: the weekday matches
    star = parse_cron("0 9 */1 * MON")  # starts with *: a day must match both, so Mondays only
    assert next_fire(star, UTC, t) == z(2026, 7, 6, 9)
    assert next_fire(parse_cron("0 9 1 * *"), UTC, t) == z(2026, 7, 1, 9)
    assert next_fire(parse_cron("0 9 1 * *"), UTC, z(2026, 7, 1, 9)) == z(2026, 8, 1, 9)


def test_a_zone_shifts_fire_times() -> None:
    c = parse_cron("0 9 * * MON")
    # Monday 6 July 2026 09:00 CEST = 07:00Z; 09:00 EDT = 13:00Z
    assert next_fire(c, BERLIN, z(2026, 7, 1)) == z(2026, 7, 6, 7)
    assert next_fire(c, NEW_YORK, z(2026, 7, 1)) == z(2026, 7, 6, 13)
    assert prev_fire(c, BERLIN, z(2026, 7, 6, 7)) == z(2026, 7, 6, 7)  # at or before
    assert prev_fire(c, BERLIN, z(2026, 7, 6, 6, 59)) == z(2026, 6, 29, 7)


def test_leap_day_fires_every_four_years() -> None:
    c = parse_cron("0 12 29 2 *")
    assert next_fire(c, UTC, z(2026, 3, 1)) == z(2028, 2, 29, 12)
    assert prev_fire(c, UTC, z(2026, 3, 1)) == z(2024, 2, 29, 12)
    # 2100 is no leap year (divisible by 100, not by 400): 2096 -> 2104
    assert next_fire(c, UTC, z(2097, 1, 1)) == z(2104, 2, 29, 12)


def test_months_outside_the_cron_are_skipped_across_years() -> None:
    c = parse_cron("0 6 15 MAR,SEP *")
    assert next_fire(c, UTC, z(2026, 4, 1)) == z(2026, 9, 15, 6)
    assert prev_fire(c, UTC, z(2026, 9, 15, 5, 59)) == z(2026, 3, 15, 6)
    assert next_fire(c, UTC, z(2026, 9, 15, 6)) == z(2027, 3, 15, 6)
    new_year = parse_cron("0 0 1 JAN *")
    assert prev_fire(new_year, UTC, z(2026, 6, 1)) == z(2026, 1, 1)
    assert next_fire(new_year, UTC, z(2026, 6, 1)) == z(2027, 1, 1)
    assert prev_fire(parse_cron("59 23 31 DEC *"), UTC, z(2026, 12, 31, 23, 58)) == z(2025, 12, 31, 23, 59)


def test_spring_forward_a_skipped_time_fires_at_the_change() -> None:
    c = parse_cron("30 2 * * *")
    # Berlin 29 March: 02:30 does not exist; the clocks jump 02:00 -> 03:00 at 01:00Z, which is when it fires
    assert next_fire(c, BERLIN, z(2026, 3, 28, 12)) == z(2026, 3, 29, 1)
    assert next_fire(c, BERLIN, z(2026, 3, 29, 1)) == z(2026, 3, 30, 0, 30)  # 02:30 CEST the next day
    assert prev_fire(c, BERLIN, z(2026, 3, 29, 1, 59)) == z(2026, 3, 29, 1)
    assert prev_fire(c, BERLIN, z(2026, 3, 29, 0, 59)) == z(2026, 3, 28, 1, 30)  # 02:30 CET the day before
    # New York 8 March: 02:00 EST -> 03:00 EDT at 07:00Z
    assert next_fire(c, NEW_YORK, z(2026, 3, 7, 12)) == z(2026, 3, 8, 7)
    # times after the gap are untouched: 03:00 EDT = 07:00Z as well, 03:30 EDT = 07:30Z
    assert next_fire(parse_cron("30 3 * * *"), NEW_YORK, z(2026, 3, 7, 12)) == z(2026, 3, 8, 7, 30)


def test_fall_back_a_repeated_time_fires_once_at_its_first_occurrence() -> None:
    c = parse_cron("30 2 * * *")
    # Berlin 25 October: 02:00-03:00 happens twice, first in CEST (00:00-01:00Z), then in CET (01:00-02:00Z)
    assert next_fire(c, BERLIN, z(2026, 10, 24, 12)) == z(2026, 10, 25, 0, 30)
    assert next_fire(c, BERLIN, z(2026, 10, 25, 0, 30)) == z(2026, 10, 26, 1, 30)  # not again at 01:30Z
    assert prev_fire(c, BERLIN, z(2026, 10, 25, 1, 45)) == z(2026, 10, 25, 0, 30)  # during the second 02:45
    # New York 1 November: 01:00-02:00 twice (05:00-06:00Z EDT, then 06:00-07:00Z EST)
    assert next_fire(parse_cron("30 1 * * *"), NEW_YORK, z(2026, 10, 31, 12)) == z(2026, 11, 1, 5, 30)
    assert next_fire(parse_cron("30 1 * * *"), NEW_YORK, z(2026, 11, 1, 5, 30)) == z(2026, 11, 2, 6, 30)


@pytest.mark.parametrize("text", ["*/30 * * * *", "0,30 * * * *", "*/30 2 * * *", "0,30 */2 * * *"])
def test_fall_back_a_wildcard_cron_fires_again_in_the_repeated_hour(text: str) -> None:
    # Vixie cron runs a job whose minute or hour field starts with `*` again when the clocks fall back
    # (cron.c, "DST ending: just run the wildcard jobs"): 02:00 and 02:30 CEST (00:00Z, 00:30Z), then 02:00
    # and 02:30 CET (01:00Z, 01:30Z), then 03:00 CET (02:00Z) where the hours allow it
    c = parse_cron(text)
    fired, t = [], z(2026, 10, 24, 23, 59)
    while (t := next_fire(c, BERLIN, t)) is not None and t < z(2026, 10, 25, 2, 1):  # type: ignore[assignment]
        fired.append(t)
    want = [z(2026, 10, 25, 0), z(2026, 10, 25, 0, 30), z(2026, 10, 25, 1), z(2026, 10, 25, 1, 30)]
    if 3 in c.hours:
        want.append(z(2026, 10, 25, 2))
    assert fired[-len(want):] == want
    # and backwards: the second 02:30 is the latest fire at 01:45Z, the first 02:30 just before 01:00Z
    assert prev_fire(c, BERLIN, z(2026, 10, 25, 1, 45)) == z(2026, 10, 25, 1, 30)
    assert prev_fire(c, BERLIN, z(2026, 10, 25, 0, 59)) == z(2026, 10, 25, 0, 30)
    # New York 1 November, hourly: 01:00 EDT (05:00Z), 01:00 EST (06:00Z), 02:00 EST (07:00Z)
    hourly = parse_cron("@hourly")
    assert next_fire(hourly, NEW_YORK, z(2026, 11, 1, 5)) == z(2026, 11, 1, 6)
    assert next_fire(hourly, NEW_YORK, z(2026, 11, 1, 6)) == z(2026, 11, 1, 7)


# ---- the floor ----

def window(start: str, *, end: str | None = None, duration: float | None = None, zone: str = "Europe/Berlin",
           replicas: int = 3, lead: float | None = 0.0) -> WarmWindow:
    return WarmWindow(parse_cron(start), zone, replicas, None if end is None else parse_cron(end), duration, lead)


def test_a_window_holds_its_floor_from_start_to_end_half_open() -> None:
    office = window("0 9 * * MON-FRI", end="0 17 * * MON-FRI")
    # Monday 6 July 2026, CEST: 09:00 = 07:00Z, 17:00 = 15:00Z
    assert floor_at([office], z(2026, 7, 6, 6, 59, 59)) == (0, None)
    n, open_ = floor_at([office], z(2026, 7, 6, 7))
    assert n == 3 and open_ is not None
    assert (open_.index, open_.opens_at, open_.starts_at, open_.ends_at) == (0, z(2026, 7, 6, 7), z(2026, 7, 6, 7),
                                                                            z(2026, 7, 6, 15))
    assert floor_at([office], z(2026, 7, 6, 14, 59, 59))[0] == 3
    assert floor_at([office], z(2026, 7, 6, 15)) == (0, None)
    assert floor_at([office], z(2026, 7, 4, 10)) == (0, None)  # Saturday


def test_the_lead_opens_the_floor_early() -> None:
    launch = window("0 9 * * MON", duration=3600.0, lead=600.0)
    assert floor_at([launch], z(2026, 7, 6, 6, 49, 59))[0] == 0
    n, open_ = floor_at([launch], z(2026, 7, 6, 6, 50))  # 08:50 CEST: ten minutes early
    assert n == 3 and open_ is not None and open_.opens_at == z(2026, 7, 6, 6, 50) and open_.lead == 600.0
    assert floor_at([launch], z(2026, 7, 6, 7, 59, 59))[0] == 3
    assert floor_at([launch], z(2026, 7, 6, 8))[0] == 0
    # no leadTime: the caller's default (the scaler passes its forecast horizon)
    default = window("0 9 * * MON", duration=3600.0, lead=None)
    assert floor_at([default], z(2026, 7, 6, 6, 40), default_lead=1200.0)[0] == 3
    assert floor_at([default], z(2026, 7, 6, 6, 39, 59), default_lead=1200.0)[0] == 0


def test_overlapping_windows_take_the_largest_floor_first_listed_on_a_tie() -> None:
    day = window("0 8 * * *", end="0 20 * * *", replicas=2)
    peak = window("0 12 * * *", duration=3600.0, replicas=5)
    same = window("0 12 * * *", duration=7200.0, replicas=5)
    assert floor_at([day, peak], z(2026, 7, 6, 9))[0] == 2  # 11:00 CEST: only the day window
    n, open_ = floor_at([day, peak, same], z(2026, 7, 6, 10, 30))
    assert n == 5 and open_ is not None and open_.index == 1
    n, open_ = floor_at([day, peak, same], z(2026, 7, 6, 11, 30))  # peak over, same still open
    assert n == 5 and open_ is not None and open_.index == 2


def test_a_window_across_midnight_with_an_end_cron() -> None:
    night = window("0 22 * * *", end="0 2 * * *", zone="UTC", replicas=4)
    assert floor_at([night], z(2026, 7, 7, 1, 0))[0] == 4  # opened yesterday 22:00, ends 02:00
    assert floor_at([night], z(2026, 7, 7, 2, 0))[0] == 0
    assert floor_at([night], z(2026, 7, 7, 21, 59))[0] == 0


def test_a_duration_is_elapsed_time_across_a_clock_change() -> None:
    # 01:00 CEST on 25 October is 23:00Z the day before; three hours later is 02:00Z (03:00 CET on the wall)
    w = window("0 1 25 10 *", duration=3 * 3600.0)
    assert floor_at([w], z(2026, 10, 25, 1, 59))[0] == 3
    assert floor_at([w], z(2026, 10, 25, 2, 0))[0] == 0


def test_windows_at_0230_on_the_dst_days() -> None:
    """Documented in docs/design.md: spring forward opens at the change, fall back opens once."""
    spring = window("30 2 29 3 *", end="30 3 29 3 *")  # 02:30 is skipped; 03:30 CEST = 01:30Z
    assert floor_at([spring], z(2026, 3, 29, 0, 59))[0] == 0
    assert floor_at([spring], z(2026, 3, 29, 1, 0))[0] == 3  # the change, 03:00 CEST
    assert floor_at([spring], z(2026, 3, 29, 1, 30))[0] == 0
    fall = window("30 2 25 10 *", duration=1800.0)  # the first 02:30 (CEST, 00:30Z), for 30 minutes
    assert floor_at([fall], z(2026, 10, 25, 0, 30))[0] == 3
    assert floor_at([fall], z(2026, 10, 25, 1, 0))[0] == 0
    assert floor_at([fall], z(2026, 10, 25, 1, 30))[0] == 0  # the second 02:30 (CET) opens nothing
    # an hourly window opens in the repeated hour again (Vixie's wildcard jobs; robfig/cron, which KEDA's
    # cron scaler uses, fires it too): 02:00 CEST (00:00Z) and 02:00 CET (01:00Z), 50 minutes each
    hourly = window("0 * * * *", duration=3000.0)
    for at, want in (((0, 49), 3), ((0, 55), 0), ((1, 0), 3), ((1, 49), 3), ((1, 55), 0), ((2, 0), 3)):
        assert floor_at([hourly], z(2026, 10, 25, *at))[0] == want, at


def test_an_end_a_long_way_off_is_capped() -> None:
    year = window("0 0 1 1 *", end="0 0 31 12 *", zone="UTC")
    assert floor_at([year], z(2026, 1, 31, 23, 59))[0] == 3
    assert floor_at([year], z(2026, 1, 1) + MAX_DURATION)[0] == 0  # 1 February: 31 days at most


def test_warm_floor_shows_the_window_in_the_details() -> None:
    details: dict[str, float] = {}
    ws = (window("0 9 * * *", duration=3600.0, replicas=1), window("0 9 * * MON", duration=600.0, lead=None))
    assert warm_floor(ws, z(2026, 7, 6, 6, 55), 300.0, details) == 3
    assert details == {"warm_window": 1.0, "warm_window_floor": 3.0, "warm_window_opens_at": z(2026, 7, 6, 6, 55),
                       "warm_window_starts_at": z(2026, 7, 6, 7), "warm_window_ends_at": z(2026, 7, 6, 7, 10),
                       "warm_window_lead_s": 300.0}
    details.clear()
    assert warm_floor(ws, z(2026, 7, 6, 12), 300.0, details) == 0 and details == {}


# ---- the warmWindows key ----

BLOCK = """
- start: "0 9 * * MON"     # the Monday launch
  duration: 2h
  timezone: Europe/Berlin
  desiredReplicas: 4
  leadTime: 15m
- start: 30 1 * * *
  end: 0 5 * * *
  timezone: UTC
  desiredReplicas: "2"
"""


def test_the_key_parses_a_yaml_list() -> None:
    c = parse_metadata({"model": "m", "warmWindows": BLOCK})
    a, b = c.warm_windows
    assert (a.start.text, a.duration, a.end, a.timezone, a.replicas, a.lead) == (
        "0 9 * * MON", 7200.0, None, "Europe/Berlin", 4, 900.0)
    assert (b.start.text, b.duration, b.end is not None and b.end.text, b.timezone, b.replicas, b.lead) == (
        "30 1 * * *", None, "0 5 * * *", "UTC", 2, None)
    flow = parse_windows('[{start: "0 9 * * MON-FRI", duration: 9h, timezone: Europe/Berlin, desiredReplicas: 2}]')
    assert flow[0].duration == 9 * 3600.0 and flow[0].start.weekdays == {1, 2, 3, 4, 5}
    assert parse_windows("[{start: '@daily', duration: 90, timezone: UTC, desiredReplicas: 1}]")[0].duration == 90.0


ONE = "start: '0 9 * * *'\n  timezone: UTC\n  desiredReplicas: 1\n  "


@pytest.mark.parametrize(("value", "says"), [
    ("[", "not YAML"),
    ("- start: */5 * * * *\n  duration: 1h\n  timezone: UTC\n  desiredReplicas: 1", "quote cron expressions"),
    ("start: '0 9 * * *'", "a YAML list of windows"),
    ("[]", "a YAML list of windows"),
    ("[" + ", ".join(["{start: '0 9 * * *', duration: 1h, timezone: UTC, desiredReplicas: 1}"] * 17) + "]",
     "at most 16 windows, got 17"),
    ("- 5", "window 1: must be a mapping"),
    ("- " + ONE + "duration: 1h\n  size: 3", "window 1: unknown key 'size'"),
    ("- " + ONE + "duration: 1h\n  end: '0 10 * * *'", "give exactly one of end"),
    ("- " + ONE.rstrip(), "give exactly one of end"),
    ("- " + ONE + "duration: 0s", "duration '0s' must be more than 0"),
    ("- " + ONE + "duration: 745h", "at most 31 days"),
    ("- " + ONE + "duration: nan", "duration"),
    ("- " + ONE + "duration: 1h\n  leadTime: 25h", "leadTime '25h' must be at least 0 and at most 1 days"),
    ("- " + ONE + "duration: 1h\n  leadTime: -1s", "leadTime"),
    ("- " + ONE + "duration: [1]", "duration must be a string"),
    ("- " + ONE + "end: '0 9 * * *'", "start and end must differ"),
    ("- " + ONE + "end: '0 25 * * *'", "window 1: end: hour 25 is out of range"),
    ("- start: '0 0 30 2 *'\n  duration: 1h\n  timezone: UTC\n  desiredReplicas: 1", "window 1: start: '0 0 30 2 *' "
     "never fires"),
    ("- duration: 1h\n  timezone: UTC\n  desiredReplicas: 1", "start is required"),
    ("- start: '0 9 * * *'\n  duration: 1h\n  desiredReplicas: 1", "timezone is required"),
    ("- start: '0 9 * * *'\n  duration: 1h\n  timezone: Mars/Olympus\n  desiredReplicas: 1",
     "timezone 'Mars/Olympus' is not an IANA time zone name"),
    ("- start: '0 9 * * *'\n  duration: 1h\n  timezone: ../../etc/passwd\n  desiredReplicas: 1", "not an IANA"),
    ("- start: '0 9 * * *'\n  duration: 1h\n  timezone: /etc/localtime\n  desiredReplicas: 1", "not an IANA"),
    ("- start: '0 9 * * *'\n  duration: 1h\n  timezone: UTC", "desiredReplicas is required"),
    ("- " + ONE.replace("desiredReplicas: 1", "desiredReplicas: 0") + "duration: 1h", "must be in 1-2147483647"),
    ("- " + ONE.replace("desiredReplicas: 1", "desiredReplicas: 2147483648") + "duration: 1h", "must be in 1-"),
    ("- " + ONE.replace("desiredReplicas: 1", "desiredReplicas: true") + "duration: 1h", "must be a whole number"),
    ("- " + ONE.replace("desiredReplicas: 1", "desiredReplicas: 2.5") + "duration: 1h", "must be a whole number"),
    ("- " + ONE.replace("desiredReplicas: 1", "desiredReplicas: .nan") + "duration: 1h", "must be a whole number"),
    ("- " + ONE.replace("desiredReplicas: 1", "desiredReplicas: '\u0663'") + "duration: 1h", "must be a whole number"),
    ("- " + ONE + "duration: 1h\n- " + ONE + "duration: 1h\n  leadTime: x", "window 2: "),
    ("x" * 20_000, "at most 16384 characters"),
    ("[" * 5000 + "]" * 5000, ""),  # deep nesting: refused, whatever YAML says
])
def test_bad_windows_are_a_config_error_naming_the_key(value: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_metadata({"model": "m", "warmWindows": value})
    assert info.value.key == "warmWindows"
    assert says in info.value.problem


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago",
                                  "America/Havana", "Asia/Kolkata", "UTC"])
def test_the_arithmetic_clock_agrees_with_the_exact_conversion_every_day(zone: str) -> None:
    """`_fires` does plain arithmetic on days that keep one offset (the fast path every decision takes):
    over a whole year it must agree with `_instant`, which converts each wall time through zoneinfo. Lord
    Howe shifts by 30 minutes; Santiago and Havana change their clocks at midnight."""
    from datetime import date, timedelta

    from keda_llm.scaler.schedule import _fires, _instant

    tz = ZoneInfo(zone)
    fixed = parse_cron("0,30,59 0,1,2,3,12,23 * * *")  # no wildcard: one instant per wall time, every day
    day = date(2026, 1, 1)
    for _ in range(365):
        items, at = _fires(fixed, day, tz)
        assert [at(i) for i in items] == sorted(_instant(day, h, m, tz) for h, m in fixed.times), day
        day += timedelta(days=1)


@pytest.mark.parametrize("text, after, want", [
    # Vixie's AND rule (`*/7` starts with `*`): 1 January that is a Sunday; from 2000 the next is 2006
    ("0 0 1 1 */7", "2000-01-01T00:00:00", "2006-01-01T00:00:00"),
    # 1 March on a Sunday: 1998, then 2009 (eleven years)
    ("0 0 1 3 */7", "1998-03-01T00:00:01", "2009-03-01T00:00:00"),
    # 29 February on a Sunday: 2004, then 2032 (the 28-year cycle)
    ("0 0 29 2 */7", "2004-02-29T00:00:01", "2032-02-29T00:00:00"),
])
def test_rare_date_and_weekday_crons_are_found_years_ahead(text: str, after: str, want: str) -> None:
    # found by the property test in CI: the scan stopped after eight years and answered "never"
    c = parse_cron(text)
    t = datetime.fromisoformat(after).replace(tzinfo=timezone.utc).timestamp()
    got = next_fire(c, UTC, t)
    assert got == datetime.fromisoformat(want).replace(tzinfo=timezone.utc).timestamp()
    assert prev_fire(c, UTC, got + 1) == got
