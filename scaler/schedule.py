"""Scheduled warm windows: a replica floor for known events (a Monday 9:00 launch, a nightly batch).

Demand that is known in advance should find capacity already there: a forecast learns it only from
history, and a cold start is minutes. A window is a start cron plus an end cron or a duration, in an
IANA time zone, with a replica floor (`desiredReplicas`), spelled as KEDA's own `cron` scaler spells its
metadata (`start`, `end`, `timezone`, `desiredReplicas`: keda.sh/docs/2.17/scalers/cron). While a window
is open the count is at least its floor; the floor begins `lead` seconds before the start, by default
one forecast horizon (a cold start plus KEDA's poll and the HPA's sync), so that the replicas serve
when the event begins rather than a cold start after it.

The cron grammar, small and strict: five fields, minute (0-59) hour (0-23) day-of-month (1-31) month
(1-12 or JAN-DEC) day-of-week (0-7, 0 and 7 both Sunday, or SUN-SAT); each field a comma list of `*`,
`N`, `N-M`, `*/S` or `N-M/S`; names are case-insensitive and allowed wherever a number is (MON-FRI, as
robfig/cron, which KEDA uses, accepts); the macros @yearly (@annually), @monthly, @weekly, @daily
(@midnight) and @hourly. Refused, with the reason: seconds or year fields, Quartz's `?`, `L`, `W`
and `#`, `N/S` without a range, ranges that run backwards, and a day-of-month that never occurs in the
months given (`0 0 30 2 *`: February 30th would never open the window).

Day-of-month and day-of-week follow Vixie cron (vixie/cron entry.c and cron.c `find_jobs`): when either
field starts with `*` a day must match both; when both are restricted, either one suffices
(`0 9 1 * MON` fires on the 1st and on every Monday).

Time zones and DST: a cron fires on wall-clock times in its zone. A wall time that does not exist (the
hour skipped when clocks spring forward) fires at the change itself, the first instant after the gap,
as Vixie cron runs the jobs of a skipped hour right after the change: the window opens early rather
than not at all. A wall time that occurs twice (clocks fall back) fires once, at its first occurrence,
as Vixie cron runs a job at a fixed time; a cron whose minute or hour field starts with `*` fires in the
repeated hour again, as Vixie cron runs its wildcard jobs then (cron.c, "DST ending"). A `duration` is
elapsed time from the start instant, so a 1h window across a change is still one hour long. Pure: every
function takes `now` (epoch seconds).
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from calendar import monthrange
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from keda_llm.common import yamltext
from keda_llm.common.durations import parse_duration

MAX_WINDOWS = 16
MAX_DURATION = 31 * 86400.0  # a window longer than a month is a minReplicas, not an event
MAX_LEAD = 86400.0  # no start-up takes longer than a day
MAX_TEXT = 16384  # the metadata value, before YAML sees it
MAX_CRON = 256
MAX_REPLICAS = 2**31 - 1  # KEDA's replica counts are int32
# Days scanned for a fire time. A leap-day cron skips 2100 (2096 -> 2104), and a date AND a weekday (Vixie's
# rule when one day field starts with `*`: '0 0 1 1 */7' is 1 January on a Sunday) recurs every 28 years at
# most, up to 40 across the skipped leap day of 2100. Months a cron excludes are skipped whole, so a rare cron
# costs about a day's check per allowed day scanned.
SCAN_DAYS = 40 * 366 + 2

_MONTHS = {n: i + 1 for i, n in enumerate(("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT",
                                            "NOV", "DEC"))}
_DAYS = {n: i for i, n in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
# (name, lowest, highest, names)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day-of-month", 1, 31, {}), ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 7, _DAYS))
_ELEMENT = re.compile(r"(?P<range>\*|(?P<lo>\w+)(?:-(?P<hi>\w+))?)(?:/(?P<step>\d+))?", re.ASCII)


@dataclass(frozen=True)
class Cron:
    """A parsed 5-field cron expression: the sets it allows, and Vixie's day-field flags."""

    text: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]  # day of month, 1-31
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday
    day_star: bool  # the day-of-month field starts with `*` (Vixie DOM_STAR)
    weekday_star: bool  # the day-of-week field starts with `*` (Vixie DOW_STAR)
    time_star: bool = False  # the minute or hour field starts with `*` (MIN_STAR|HR_STAR): fires in a repeated hour

    @property
    def times(self) -> tuple[tuple[int, int], ...]:
        """Every (hour, minute) of a matching day, in order."""
        return _times(self.hours, self.minutes)

    def matches_day(self, d: date) -> bool:
        if d.month not in self.months:
            return False
        dom = d.day in self.days
        dow = (d.weekday() + 1) % 7 in self.weekdays  # Python: Monday 0; cron: Sunday 0
        return (dom and dow) if self.day_star or self.weekday_star else (dom or dow)


@lru_cache(maxsize=256)
def _times(hours: tuple[int, ...], minutes: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    return tuple((h, m) for h in hours for m in minutes)


def _value(text: str, field: str, lo: int, hi: int, names: dict[str, int]) -> int:
    word = text.upper()
    if word in names:
        return names[word]
    if not (text.isascii() and text.isdigit()):
        known = f" or a name ({', '.join(names)})" if names else ""
        raise ValueError(f"{field} {text!r} is not a number in {lo}-{hi}{known}")
    v = int(text)
    if not lo <= v <= hi:
        raise ValueError(f"{field} {v} is out of range {lo}-{hi}")
    return v


def _field(text: str, field: str, lo: int, hi: int, names: dict[str, int]) -> set[int]:
    out: set[int] = set()
    for element in text.split(","):
        m = _ELEMENT.fullmatch(element)
        if m is None:
            raise ValueError(f"{field} {element!r}: use *, N, N-M, */S or N-M/S (no ?, L, W or #)")
        if m["range"] == "*":
            first, last = lo, hi
        else:
            first = _value(m["lo"], field, lo, hi, names)
            last = first if m["hi"] is None else _value(m["hi"], field, lo, hi, names)
            if m["step"] is not None and m["hi"] is None:
                raise ValueError(f"{field} {element!r}: a step needs a range (write {m['lo']}-{hi}/{m['step']})")
            if last < first:
                raise ValueError(f"{field} {element!r}: the range runs backwards")
        step = 1 if m["step"] is None else int(m["step"])
        if not 1 <= step <= hi - lo + 1:
            raise ValueError(f"{field} {element!r}: the step must be in 1-{hi - lo + 1}")
        out.update(range(first, last + 1, step))
    return out


def parse_cron(text: str) -> Cron:
    """A 5-field cron expression (see the module docstring), or ValueError saying what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"a cron expression must be a string, got {type(text).__name__}")
    s = " ".join(text.split())
    if len(s) > MAX_CRON:
        raise ValueError(f"a cron expression of at most {MAX_CRON} characters")
    expanded = _MACROS.get(s.lower(), s)
    if expanded.startswith("@"):
        raise ValueError(f"unknown macro {s!r} (known: {', '.join(_MACROS)})")
    parts = expanded.split()
    if len(parts) != 5:
        raise ValueError(f"{s!r} has {len(parts)} fields; a cron expression has 5: minute hour day-of-month "
                         "month day-of-week (no seconds, no year)")
    sets = [_field(p, *spec) for p, spec in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in sets[4])
    day_star, weekday_star = parts[2].startswith("*"), parts[4].startswith("*")
    time_star = parts[0].startswith("*") or parts[1].startswith("*")
    cron = Cron(s, tuple(sorted(sets[0])), tuple(sorted(sets[1])), frozenset(sets[2]), frozenset(sets[3]), weekdays,
                day_star, weekday_star, time_star)
    either = not (day_star or weekday_star)  # either day field suffices: the weekday always comes round
    if not either and not any(d <= monthrange(2024, m)[1] for m in cron.months for d in cron.days):
        raise ValueError(f"{s!r} never fires: day-of-month {parts[2]} does not occur in month {parts[3]}")
    return cron


# ---- wall clock -> instants ----

def _instant(day: date, hour: int, minute: int, zone: ZoneInfo) -> float:
    """The epoch second at which `day hour:minute` (wall clock in `zone`) fires: the first occurrence of a
    repeated time, the end of the gap for a skipped one. Monotone in the wall time, which the searches
    below rely on."""
    wall = datetime(day.year, day.month, day.day, hour, minute)
    first = wall.replace(tzinfo=zone).timestamp()  # fold=0: the offset before a change (PEP 495)
    if datetime.fromtimestamp(first, zone).replace(tzinfo=None) == wall:
        return first
    # In a gap: fold=0 read the wall time with the old offset, which lands past the change; fold=1 with the
    # new one, before it. The change is the first second between them that has the new offset.
    lo, hi = int(wall.replace(tzinfo=zone, fold=1).timestamp()), int(first)
    before = datetime.fromtimestamp(lo, zone).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, zone).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return float(hi)


_EPOCH_DAY = date(1970, 1, 1).toordinal()


@lru_cache(maxsize=4096)
def _day_offset(key: str, ordinal: int) -> float | None:
    """The zone's UTC offset in seconds throughout local day `ordinal`, or None if it changes that day."""
    zone = ZoneInfo(key)
    d = date.fromordinal(ordinal)
    midnight = datetime(d.year, d.month, d.day, tzinfo=zone)
    offset = midnight.utcoffset()
    after = datetime.fromtimestamp(midnight.timestamp() + 86400.0, zone).utcoffset()
    return None if offset is None or offset != after else offset.total_seconds()


def _fires(cron: Cron, day: date, zone: ZoneInfo) -> tuple[Sequence[Any], Callable[[Any], float]]:
    """A matching day's fire instants as (items, key), ascending by key. Most days keep one offset, so the
    items are the cron's (hour, minute)s and the key plain arithmetic (a decision per second per
    ScaledObject runs this); a day with a change lists its instants (`_change_day`)."""
    offset = _day_offset(zone.key, day.toordinal())
    if offset is None:
        return _change_day(cron, day.toordinal(), zone.key), float
    base = (day.toordinal() - _EPOCH_DAY) * 86400.0 - offset

    def at(hm: tuple[int, int]) -> float:
        return base + hm[0] * 3600.0 + hm[1] * 60.0
    return cron.times, at


@lru_cache(maxsize=64)
def _change_day(cron: Cron, ordinal: int, key: str) -> tuple[float, ...]:
    """The instants `cron` fires at on local day `ordinal`, a day the offset changes: each time at its first
    occurrence (`_instant`), and a wildcard cron's (`time_star`) repeated times at their second as well."""
    zone, day = ZoneInfo(key), date.fromordinal(ordinal)
    out = []
    for h, m in cron.times:
        first = _instant(day, h, m, zone)
        out.append(first)
        if cron.time_star:
            wall = datetime(day.year, day.month, day.day, h, m)
            again = wall.replace(tzinfo=zone, fold=1).timestamp()  # fold=1: the second occurrence (PEP 495)
            if again != first and datetime.fromtimestamp(again, zone).replace(tzinfo=None) == wall:
                out.append(again)
    return tuple(sorted(out))


def _local_day(t: float, zone: ZoneInfo) -> date:
    return datetime.fromtimestamp(t, zone).date()


def prev_fire(cron: Cron, zone: ZoneInfo, t: float) -> float | None:
    """The latest instant at or before `t` at which `cron` fires in `zone`; None if none within SCAN_DAYS."""
    try:
        day = _local_day(t, zone) + timedelta(days=1)  # a fall-back across midnight repeats a date
        stop = day - timedelta(days=SCAN_DAYS)
        while day > stop:
            if day.month not in cron.months:
                day = day.replace(day=1) - timedelta(days=1)  # the last day of the month before
                continue
            if cron.matches_day(day):
                items, at = _fires(cron, day, zone)
                i = bisect_right(items, t, key=at)
                if i:
                    return at(items[i - 1])
            day -= timedelta(days=1)
    except (OverflowError, ValueError):  # past year 1 or 9999
        return None
    return None


def next_fire(cron: Cron, zone: ZoneInfo, t: float) -> float | None:
    """The earliest instant after `t` at which `cron` fires in `zone`; None if none within SCAN_DAYS."""
    try:
        day = _local_day(t, zone) - timedelta(days=1)
        stop = day + timedelta(days=SCAN_DAYS)
        while day < stop:
            if day.month not in cron.months:
                day = (day.replace(day=28) + timedelta(days=4)).replace(day=1)  # the 1st of the next month
                continue
            if cron.matches_day(day):
                items, at = _fires(cron, day, zone)
                i = bisect_right(items, t, key=at)
                if i < len(items):
                    return at(items[i])
            day += timedelta(days=1)
    except (OverflowError, ValueError):
        return None
    return None


# ---- windows ----

@dataclass(frozen=True)
class WarmWindow:
    """One window: from each `start` until the next `end` (or for `duration` seconds), at least `replicas`."""

    start: Cron
    timezone: str  # an IANA name
    replicas: int
    end: Cron | None = None
    duration: float | None = None
    lead: float | None = None  # seconds the floor begins before the start; None: the caller's default

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)  # ZoneInfo caches by name: no file read per call

    def span(self, started: float) -> float | None:
        """When the window that started at `started` ends (at most MAX_DURATION later)."""
        if self.duration is not None:
            return started + self.duration
        assert self.end is not None
        ends = next_fire(self.end, self.zone, started)
        return None if ends is None else min(ends, started + MAX_DURATION)


@dataclass(frozen=True)
class OpenWindow:
    """A window open at some instant: which one, and its times (epoch seconds)."""

    index: int  # position in the list, from 0
    window: WarmWindow
    opens_at: float  # the floor begins (start - lead)
    starts_at: float
    ends_at: float
    lead: float


def open_window(window: WarmWindow, now: float, default_lead: float) -> tuple[float, float, float] | None:
    """(opens at, starts at, ends at) if `window` holds its floor at `now`, else None.

    The occurrence that matters is the latest start at or before now + lead: a later start is not due yet,
    and an earlier one ends no later than it (a fixed duration, or the first end after each start)."""
    lead = default_lead if window.lead is None else window.lead
    started = prev_fire(window.start, window.zone, now + lead)
    if started is None:
        return None
    ends = window.span(started)
    if ends is None or now >= ends:
        return None
    return started - lead, started, ends


def floor_at(windows: Iterable[WarmWindow], now: float, default_lead: float = 0.0) -> tuple[int, OpenWindow | None]:
    """The replica floor at `now`: the largest `replicas` among the open windows (the first listed on a
    tie), with that window; (0, None) when none is open."""
    best: OpenWindow | None = None
    for i, w in enumerate(windows):
        times = open_window(w, now, default_lead)
        if times is not None and (best is None or w.replicas > best.window.replicas):
            best = OpenWindow(i, w, *times, lead=times[1] - times[0])
    return (0, None) if best is None else (best.window.replicas, best)


def warm_floor(windows: Iterable[WarmWindow], now: float, default_lead: float,
               details: MutableMapping[str, float]) -> int:
    """The decision pipeline's step (scaler/decide.py): the floor at `now`, with the open window's numbers
    added to the decision's details (epoch seconds, its index in `warmWindows` from 0)."""
    floor, win = floor_at(windows, now, default_lead)
    if win is not None:
        details.update({"warm_window": float(win.index), "warm_window_floor": float(floor),
                        "warm_window_opens_at": win.opens_at, "warm_window_starts_at": win.starts_at,
                        "warm_window_ends_at": win.ends_at, "warm_window_lead_s": win.lead})
    return floor


# ---- the metadata value ----

_WINDOW_KEYS = ("start", "end", "duration", "timezone", "desiredReplicas", "leadTime")


def _text(item: dict[Any, Any], key: str) -> str | None:
    v = item.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        raise ValueError(f"{key} must be a string, got {type(v).__name__}")
    return str(v)


def _seconds(item: dict[Any, Any], key: str, lo_open: bool, hi: float) -> float | None:
    text = _text(item, key)
    if text is None:
        return None
    try:
        v = parse_duration(text)
    except ValueError as e:
        raise ValueError(f"{key} {text!r}: {e}") from None
    if not math.isfinite(v) or v < 0 or (lo_open and v == 0) or v > hi:
        raise ValueError(f"{key} {text!r} must be {'more than 0' if lo_open else 'at least 0'} and at most "
                         f"{hi / 86400:g} days")
    return v


def _replicas(item: dict[Any, Any]) -> int:
    v = item.get("desiredReplicas")
    if v is None:
        raise ValueError("desiredReplicas is required")
    if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, str) and v.strip().isascii()
                                                          and v.strip().isdigit())):
        raise ValueError(f"desiredReplicas {v!r} must be a whole number")
    n = int(v)
    if not 1 <= n <= MAX_REPLICAS:
        raise ValueError(f"desiredReplicas {n} must be in 1-{MAX_REPLICAS}")
    return n


def _zone(item: dict[Any, Any]) -> str:
    name = _text(item, "timezone")
    if name is None:
        raise ValueError("timezone is required (an IANA name such as Europe/Berlin, or UTC)")
    name = name.strip()
    try:
        if len(name) > 64:
            raise ValueError
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"timezone {name[:64]!r} is not an IANA time zone name (such as Europe/Berlin)") from None
    return name


def _cron(key: str, text: str) -> Cron:
    try:
        return parse_cron(text)
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None


def _window(item: Any) -> WarmWindow:
    if not isinstance(item, dict):
        raise ValueError(f"must be a mapping with keys {', '.join(_WINDOW_KEYS)}")
    unknown = [str(k) for k in item if k not in _WINDOW_KEYS]
    if unknown:
        raise ValueError(f"unknown key {unknown[0][:40]!r} (known: {', '.join(_WINDOW_KEYS)})")
    start = _text(item, "start")
    if start is None:
        raise ValueError("start is required (a cron expression)")
    end_text = _text(item, "end")
    duration = _seconds(item, "duration", True, MAX_DURATION)
    if (end_text is None) == (duration is None):
        raise ValueError("give exactly one of end (a cron expression) and duration (such as 2h)")
    cron = _cron("start", start)
    end = None if end_text is None else _cron("end", end_text)
    if end is not None and end.text == cron.text:
        raise ValueError("start and end must differ (as in KEDA's cron scaler)")
    return WarmWindow(cron, _zone(item), _replicas(item), end, duration, _seconds(item, "leadTime", False, MAX_LEAD))


def parse_windows(text: str) -> tuple[WarmWindow, ...]:
    """The `warmWindows` metadata value: a YAML list of windows (see the module docstring and the README)."""
    if len(text) > MAX_TEXT:
        raise ValueError(f"at most {MAX_TEXT} characters")
    try:
        doc = yamltext.load(text)
    except yamltext.YAMLTextError as e:
        raise ValueError(f"not YAML ({e}); quote cron expressions, e.g. start: \"*/30 9-17 * * MON-FRI\"") from None
    if not isinstance(doc, list) or not doc:
        raise ValueError("a YAML list of windows, each with start, end or duration, timezone and desiredReplicas")
    if len(doc) > MAX_WINDOWS:
        raise ValueError(f"at most {MAX_WINDOWS} windows, got {len(doc)}")
    out = []
    for i, item in enumerate(doc):
        try:
            out.append(_window(item))
        except ValueError as e:
            raise ValueError(f"window {i + 1}: {e}") from None
    return tuple(out)
