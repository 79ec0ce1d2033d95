"""Properties of scaler/schedule.py over generated crons, zones and instants (hypothesis, derandomized).

- The parser: any text raises only ValueError; any YAML-ish text for warmWindows only ConfigError.
- Fire times: prev_fire(t) <= t < next_fire(t); nothing fires strictly between them (next_fire of prev is
  next); and a fire instant read back on the zone's wall clock is a time the cron allows, except where the
  wall time was skipped (a DST gap), which fires at the change.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from keda_llm.scaler.config import ConfigError, parse_metadata
from keda_llm.scaler.schedule import Cron, next_fire, parse_cron, prev_fire

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata",
         "Pacific/Chatham"]
T_MIN, T_MAX = 946_684_800.0, 4_102_444_800.0  # 2000-01-01 .. 2100-01-01


def _element(lo: int, hi: int, names: list[str]) -> st.SearchStrategy[str]:
    n = st.integers(lo, hi)
    word = st.sampled_from(names) if names else n.map(str)
    value = st.one_of(n.map(str), word)
    rng = st.tuples(n, n).map(lambda ab: f"{min(ab)}-{max(ab)}")
    step = st.integers(1, hi - lo + 1)
    return st.one_of(value, st.just("*"), rng, step.map(lambda s: f"*/{s}"),
                     st.tuples(rng, step).map(lambda rs: f"{rs[0]}/{rs[1]}"))


def _field(lo: int, hi: int, names: list[str] | None = None) -> st.SearchStrategy[str]:
    return st.lists(_element(lo, hi, names or []), min_size=1, max_size=3).map(",".join)


CRON_TEXT = st.tuples(_field(0, 59), _field(0, 23), _field(1, 31), _field(1, 12, ["JAN", "feb", "Dec"]),
                      _field(0, 7, ["MON", "sun", "Fri"])).map(" ".join)


def _crons() -> st.SearchStrategy[Cron]:
    def parse_or_none(text: str) -> Cron | None:
        try:
            return parse_cron(text)
        except ValueError:
            return None  # e.g. a day-of-month no month given has

    return CRON_TEXT.map(parse_or_none).filter(lambda c: c is not None)  # type: ignore[return-value]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(max_size=60))
def test_any_text_is_a_cron_or_a_value_error(text: str) -> None:
    try:
        c = parse_cron(text)
    except ValueError:
        return
    assert set(c.minutes) <= set(range(60)) and set(c.hours) <= set(range(24)) and c.minutes and c.hours
    assert c.days <= set(range(1, 32)) and c.months <= set(range(1, 13)) and c.weekdays <= set(range(7))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet="-[]{}:,'\"*/ \n0123456789abcdefghijklmnopqrstuvwxyzSTARTDUR&!?#@.", max_size=80))
def test_any_warm_windows_value_parses_or_is_a_config_error(text: str) -> None:
    try:
        parse_metadata({"model": "m", "warmWindows": text})
    except ConfigError as err:
        assert err.key == "warmWindows"


@settings(max_examples=250, deadline=None, derandomize=True)
@given(_crons(), st.sampled_from(ZONES), st.floats(T_MIN, T_MAX))
def test_fire_times_bracket_t_and_land_on_allowed_wall_times(cron: Cron, zone_name: str, t: float) -> None:
    zone = ZoneInfo(zone_name)
    before, after = prev_fire(cron, zone, t), next_fire(cron, zone, t)
    assert before is not None and after is not None  # parse_cron refused the crons that never fire
    assert before <= t < after
    assert next_fire(cron, zone, before) == after  # nothing fires in between
    for fired in (before, after):
        wall = datetime.fromtimestamp(fired, zone)
        exact = wall.replace(tzinfo=None).replace(tzinfo=zone).timestamp() == fired and wall.second == 0
        gap_end = datetime.fromtimestamp(fired - 1, zone).utcoffset() != wall.utcoffset()
        if exact and not gap_end:
            assert cron.matches_day(wall.date()) and wall.hour in cron.hours and wall.minute in cron.minutes
        else:
            assert gap_end  # a skipped wall time fires at the change
