"""Fuzz: trigger metadata KEDA could send, parsed and then decided on.

Two promises. The parser lets only ConfigError escape, whatever the map holds (absurd numbers, NaN and
infinities, 400-digit durations, unicode, huge strings). And every map it accepts is finite and in
range, so deciding on it never fails: a value that parses but breaks a later int conversion is what
made every call of a ScaledObject answer INTERNAL.
"""

from __future__ import annotations

import math
import random
import string
from functools import cache

import pytest

from keda_llm.scaler.config import ConfigError, ScalerConfig, key_specs, parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.model import Decision, NoData, Observation, PolicyState, ReplicaSample, WorkloadState

SEED = 20261124
MAPS = 6000
KEYS = [spec.key for _, spec, _ in key_specs()]
EXAMPLES = {spec.key: spec.example for _, spec, _ in key_specs()}

_NUMBERS = ["0", "-0", "1", "-1", "0.5", "1.1", "2", "10", "100", "1e6", "1e9", "1e308", "1e309", "-1e309",
            "9" * 400, "-" + "9" * 400, "0." + "0" * 400 + "1", "nan", "NaN", "-nan", "inf", "-inf", "Infinity",
            "+inf", "1_000", "0x10", " 5 ", "5.", ".5", "1e-400", "2147483647", "2147483648", "-2147483648"]
_DURATIONS = ["0s", "1ns", "500ms", "6s", "60s", "10m", "1h", "1h30m", "24h", "8760h", "99999999999h",
              "9" * 400 + "h", "9" * 400 + "s", "1." + "9" * 400 + "h", "-1s", "1d", "1 s", "s", "h1", ".5s",
              "1.5h", "2562047h47m16.854775807s", "2562047h47m16.854775808s", "1e3s", "μs", "1µs1ns"]
_WORDS = ["true", "false", "True", "FALSE", "1", "0", "yes", "", " ", "tokens", "concurrency", "kvCache", "queue",
          "reactive", "proactive", "hybrid", "weighted", "mean", "max", "exporters", "prometheus",
          "http://prom:9090", "ftp://x", "a,b,,c", "m", "llama-8b"]


def _value(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.3:
        return rng.choice(_NUMBERS)
    if pick < 0.55:
        return rng.choice(_DURATIONS)
    if pick < 0.7:
        return rng.choice(_WORDS)
    if pick < 0.8:
        return repr(rng.uniform(-1, 1) * 10 ** rng.randint(-12, 40))
    if pick < 0.85:
        return str(rng.randint(-10**6, 10**6)) + rng.choice(["", "s", "m", "h", "ms", "ns", "x"])
    if pick < 0.95:
        alphabet = string.printable + "µμ∞—é\u0000\u202e"
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
    return rng.choice(string.digits) * rng.randint(1_000, 20_000)


def _metadata(rng: random.Random) -> dict[str, str]:
    md = {"model": "m"} if rng.random() < 0.9 else {}
    for key in rng.sample(KEYS, rng.randint(1, 7)):
        # mostly the documented example, so that many maps parse and reach decide; else anything
        md[key] = EXAMPLES[key] if rng.random() < 0.75 else _value(rng)
    if rng.random() < 0.1:
        md[_value(rng)[:20] or "x"] = _value(rng)  # an unknown key
    return md


@cache
def _history(stale_after: float) -> ModelHistory:
    """Two busy replicas over ten minutes, with every signal the policies read."""
    h = ModelHistory("ns", "m", stale_after=stale_after)
    for t in range(0, 600, 5):
        samples = tuple(ReplicaSample(f"p{i}", float(t), running=8.0 + i, waiting=float(t % 7), max_running=64.0,
                                      kv_usage_ratio=0.4, kv_capacity_tokens=200_000.0,
                                      prompt_tokens_total=1000.0 * t, generation_tokens_total=300.0 * t,
                                      requests_finished_total=2.0 * t, startup_seconds=120.0,
                                      ttft_sum=0.5 * t, ttft_count=float(t), itl_sum=0.03 * t * 20,
                                      itl_count=20.0 * t)
                        for i in range(2))
        h.ingest(Observation("ns", "m", float(t), samples, float(t % 3)))
    return h


WORKLOADS = [WorkloadState(current_replicas=2, ready_replicas=2), WorkloadState(current_replicas=0, ready_replicas=0),
             WorkloadState(current_replicas=12, ready_replicas=5, min_replicas=1, max_replicas=50)]


def _decide_all(config: ScalerConfig) -> list[Decision]:
    history = _history(config.stale_after)
    out = []
    for workload in WORKLOADS:
        state = PolicyState()
        for now in (600.0, 605.0, 900.0, 4000.0):
            try:
                decision, state = decide(history, config, state, workload, now)
            except NoData:
                continue
            out.append(decision)
    return out


def test_only_config_error_escapes_and_what_parses_decides() -> None:
    rng = random.Random(SEED)
    parsed = refused = 0
    for _ in range(MAPS):
        md = _metadata(rng)
        try:
            config = parse_metadata(md)
        except ConfigError as err:
            refused += 1
            assert err.key and str(err), md
            continue
        parsed += 1
        for name, _, _ in key_specs():
            value = getattr(config, name)
            if isinstance(value, float):
                assert math.isfinite(value), (name, value, md)
        try:
            decisions = _decide_all(config)
        except Exception as err:  # pragma: no cover - the failure message is the point
            pytest.fail(f"{md!r} parsed, then decide raised {type(err).__name__}: {err}")
        for d in decisions:
            assert isinstance(d.replicas, int) and d.replicas >= 0, (md, d)
    assert parsed > MAPS // 10 and refused > MAPS // 10  # both sides of the parser were exercised


@pytest.mark.parametrize(("key", "value"), [
    ("panicWindow", "9" * 400), ("panicWindow", "9" * 400 + "s"), ("stableWindow", "9" * 400 + "h"),
    ("idleTimeout", "99999999999h"), ("coldStart", "1e309"), ("staleAfter", "inf"),
    ("maxScaleUpRate", "1e308"), ("targetConcurrency", "1e309"), ("maxReplicas", "9" * 400),
    ("forecastHorizon", "2562047h47m16.854775808s"),
])
def test_absurd_values_are_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_metadata({"model": "m", key: value})
    assert info.value.key == key
    assert key in str(info.value)
