"""The activator's reading of the exporters' loads (activator/loads.py parse_loads): only finite, non-negative
numbers count. A NaN, infinite or negative load from a bad exporter would win (or lose) every routing choice
(lowest `kv_usage + 0.1 x waiting` wins); read as not reported, routing falls back to outstanding requests."""

from __future__ import annotations

import random

import pytest

from keda_llm.activator.loads import parse_loads

BODY = ('# TYPE llm_kv_cache_usage_ratio gauge\n'
        'llm_kv_cache_usage_ratio{{model="m",pod="p0",namespace="llm"}} {kv}\n'
        '# TYPE llm_requests_waiting gauge\n'
        'llm_requests_waiting{{model="m",pod="p0"}} {waiting}\n')


def test_loads_are_read_per_model_and_pod() -> None:
    assert parse_loads(BODY.format(kv="0.5", waiting="3")) == {("m", "p0"): (0.5, 3.0)}


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf", "-1"])
def test_a_value_that_is_not_a_load_is_not_reported(bad: str) -> None:
    assert parse_loads(BODY.format(kv=bad, waiting="3")) == {("m", "p0"): (None, 3.0)}
    assert parse_loads(BODY.format(kv="0.5", waiting=bad)) == {("m", "p0"): (0.5, None)}


def test_any_body_gives_loads_or_a_value_error() -> None:
    """Seeded fuzz: what escapes is ValueError (the exporter counted as bad), and every load is a number >= 0."""
    rng = random.Random(20261130)
    base = BODY.format(kv="0.5", waiting="3") + 'llm_requests_waiting{model="m",pod="p1"} 1 1700000000000\n'
    pieces = [*'{}",=\\# \n\t.eE+-0123456789abcxyz', "NaN", "+Inf", "-Inf", "llm_requests_waiting", "# TYPE ",
              " gauge", "\x00", "é"]
    for _ in range(10_000):
        chars = list(base)
        for _ in range(rng.randint(1, 5)):
            i = rng.randrange(len(chars) + 1)
            if rng.random() < 0.5:
                chars.insert(i, rng.choice(pieces))
            elif chars:
                del chars[min(i, len(chars) - 1)]
        try:
            loads = parse_loads("".join(chars))
        except ValueError:
            continue
        for kv, waiting in loads.values():
            assert all(v is None or 0 <= v < float("inf") for v in (kv, waiting))
